"""Adding a framework is one folder in backends/ plus one registry line (docs/explanations/architecture.md).

The test does exactly that in a copy of the package: a toy framework (``toylib``: NumPy arrays in a
wrapper, one global setting) gets the folder ``backends/toy/`` and the name ``"toy"`` in
``FRAMEWORKS``; nothing else is edited. A child process then finds it in every place a framework shows
up: the built-in backends and defaults, ``load_backend``, a run (its results converted, its setting
restored, its environment record and line), ``projection_loss``, a Workload's implementations,
``inspect`` and the stack's memory estimate.
"""

from __future__ import annotations

from copied import copy_with, run_child

#: The toy framework's folder: one module each, the same files as backends/jax/ and backends/torch/.
FOLDER = {
    "__init__.py": """
        from crosscheck._backends import Framework

        FRAMEWORK = Framework(
            name="toy",
            modules=("toylib",),
            extra="toy",
            backends={"toy": "ToyBackend", "toy-plain": "ToyPlainBackend"},
            defaults=("toy",),
            workload="ToyWorkloadBackend",
            plain="toy-plain",
            inspectable="a toy backend",
        )
        """,
    "stack.py": """
        import toylib

        from crosscheck.backends.numpy_fd import FiniteDifferenceOracle


        class ToyBackend:
            name = "toy"

            def grad(self, weights, x):
                toylib.SETTINGS["precision"] = "sloppy"  # a setting the guarded call must restore
                return toylib.ToyArray(FiniteDifferenceOracle().grad(weights, x).astype(weights.dtype))

            def info(self):
                return {"framework": "toy", "version": toylib.__version__, "device": "cpu"}


        class ToyPlainBackend(ToyBackend):
            name = "toy-plain"
        """,
    "workload.py": """
        class ToyWorkloadBackend:
            def __init__(self, name, loss):
                self.name, self.loss = name, loss
        """,
    "state.py": """
        import sys

        DEFAULTS = {"toy precision": "exact"}


        def read():
            return {"toy precision": sys.modules["toylib"].SETTINGS["precision"]}


        def write(key, value):
            sys.modules["toylib"].SETTINGS["precision"] = value
        """,
    "environment.py": """
        def record():
            import toylib

            return {"version": toylib.__version__, "precision": toylib.SETTINGS["precision"]}


        def line(entry):
            return f"toy {entry.get('version')}"
        """,
    "arrays.py": """
        import sys

        import numpy as np


        def to_numpy(value):
            toylib = sys.modules.get("toylib")
            if toylib is None or not isinstance(value, toylib.ToyArray):
                return value, None
            return value.data, "converted a toy array"


        def projection_loss(outputs, r):
            import toylib

            return toylib.ToyArray(np.sum(outputs.data * r))
        """,
    "walk.py": """
        def inspect_backend(backend, weights, x, result, *, check_loss):
            result.found = {"checkpoint": None}
            result.evidence.append("walked by backends/toy/walk.py")
        """,
}

TOYLIB = """
    import numpy as np

    __version__ = "0.1"
    SETTINGS = {"precision": "exact"}


    class ToyArray:
        def __init__(self, data):
            self.data = np.asarray(data)

        @property
        def shape(self):
            return self.data.shape
    """

#: Run by the child, in the copy: what it found, as JSON.
CHILD = """
    import json, sys
    import numpy as np
    import crosscheck
    from crosscheck import _backends
    from crosscheck._report.report import environment_line
    from crosscheck._evidence.inspect import inspect_backend, plain_sibling
    from crosscheck._backends import FRAMEWORKS
    from crosscheck._workloads.model.workload import GenericWorkload

    report = crosscheck.run(layers=2, batch=2, dim=3, dtype="float64", backends=["toy"])
    found = report.to_dict()
    weights, x = crosscheck.make_inputs(crosscheck.Case(layers=2, batch=2, dim=3))
    workload = crosscheck.Workload(
        name="square", parameters={"w": (2,)}, inputs={},
        reference=lambda p, i: float(np.sum(p["w"] ** 2)), implementations={"toy": lambda p, i: 0},
    )
    structure = inspect_backend(crosscheck.load_backend("toy"), weights, x)
    import toylib

    print(json.dumps({
        "builtins": list(_backends.BUILTINS),
        "defaults": list(_backends.DEFAULTS),
        "loaded": type(crosscheck.load_backend("toy-plain")).__module__,
        "passed": found["passed"],
        "notes": found["backends"]["toy"]["notes"],
        "setting": toylib.SETTINGS["precision"],
        "environment": found["environment"].get("toy"),
        "line": environment_line(found["environment"]),
        "projection": type(crosscheck.projection_loss(toylib.ToyArray(np.ones(3)))).__name__,
        "implementation": type(GenericWorkload(workload).resolve("toy")).__module__,
        "inspected": [structure.framework, structure.evidence, plain_sibling(structure)],
        "size": list(FRAMEWORKS),
    }))
    """


def test_a_framework_is_one_folder_and_one_registry_line(tmp_path):
    copy_with(tmp_path, "toy", FOLDER, {"toylib.py": TOYLIB})
    found = run_child(tmp_path, CHILD)
    assert found["builtins"][:4] == ["jax", "torch", "toy", "numpy-fd"]
    assert "toy-plain" in found["builtins"]
    assert found["defaults"] == ["jax", "torch", "toy", "numpy-fd"]
    assert found["loaded"] == "crosscheck.backends.toy.stack"
    assert found["passed"] is True  # its results converted by backends/toy/arrays.py
    assert found["notes"]["converted"] == "converted a toy array"
    assert found["notes"]["state_changed"] == ["toy precision"]
    assert found["setting"] == "exact"  # restored by backends/toy/state.py
    assert found["environment"] == {"version": "0.1", "precision": "exact"}
    assert "; toy 0.1" in found["line"]
    assert found["projection"] == "ToyArray"
    assert found["implementation"] == "crosscheck.backends.toy.workload"
    framework, evidence, plain = found["inspected"]
    assert (framework, evidence[0], plain) == ("toy", "walked by backends/toy/walk.py", "toy-plain")
    assert found["size"] == ["jax", "torch", "toy"]
