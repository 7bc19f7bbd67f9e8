"""Importing crosscheck, and using it without a framework backend, imports neither JAX nor PyTorch."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from paths import ROOT

FRAMEWORKS = ("jax", "jaxlib", "torch")

#: Printed by the child: the framework modules it ended up importing.
REPORT = f"""
import json, sys
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in {FRAMEWORKS!r})))
"""


def _frameworks_imported_by(code: str) -> list[str]:
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code) + REPORT],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(
    "code",
    [
        "import crosscheck",
        "import crosscheck; crosscheck.run; crosscheck.Case; crosscheck.load_backend; crosscheck.Report",
        "from crosscheck import *",
        "from crosscheck._cli.main import build_parser; build_parser().parse_args(['run'])",
        """
        import crosscheck
        weights, x = crosscheck.make_inputs(crosscheck.Case(layers=2, dim=3, batch=2))
        crosscheck.load_backend("numpy-fd").grad(weights, x)
        """,
        """
        import numpy as np
        import crosscheck
        report = crosscheck.run(layers=2, dim=3, batch=2, seed=1,
                                backends=[lambda weights, x: np.zeros_like(weights)])
        assert report.backends["numpy-fd"].status == "ok"
        """,
        """
        import numpy as np
        import crosscheck
        from crosscheck.testing import assert_gradients_close
        workload = crosscheck.Workload(
            name="square", parameters={"w": (3,)}, inputs={},
            reference=lambda p, i: float(np.sum(p["w"] ** 2)),
        )
        assert_gradients_close(workload, backends=[lambda p, i: {"w": 2 * p["w"]}], dtype="float64")
        """,
    ],
    ids=[
        "import",
        "public-names",
        "star-import",
        "cli-parser",
        "oracle",
        "run-with-a-function",
        "workload-and-testing-helper",
    ],
)
def test_no_framework_is_imported(code):
    assert _frameworks_imported_by(code) == []


@pytest.mark.parametrize("name", ["jax", "torch"], ids=["jax", "torch"])
def test_loading_a_framework_backend_imports_it(name):
    # The positive control: the check above would see a framework that was imported.
    if importlib.util.find_spec(name) is None:
        pytest.skip(f"{name} is not installed")
    code = f"import crosscheck; crosscheck.load_backend({name!r})"
    assert name in _frameworks_imported_by(code)


def test_a_source_checkout_imports_the_adapters_by_one_path():
    # A source checkout (the repository on PYTHONPATH, nothing installed from it) has the adapters in
    # the top-level backends/ folder: they import as crosscheck.backends.*, as from a wheel, never as a
    # second copy named backends.*.
    if not (ROOT / "backends" / "__init__.py").is_file():
        pytest.skip("not a source checkout: no backends/ beside the tests")
    code = """
    import json, sys
    import crosscheck
    oracle = crosscheck.load_backend("numpy-fd")
    adapters = sys.modules["crosscheck.backends"].__file__
    top_level = sorted(m for m in sys.modules if m.split(".")[0] == "backends")
    print(json.dumps([crosscheck.__file__, type(oracle).__module__, adapters, top_level]))
    """
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=ROOT / "tests",
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert result.returncode == 0, result.stderr
    package, module, adapters, top_level = json.loads(result.stdout.strip().splitlines()[-1])
    assert Path(package).resolve() == ROOT / "crosscheck" / "__init__.py"
    assert module == "crosscheck.backends.numpy_fd"
    assert Path(adapters).resolve() == ROOT / "backends" / "__init__.py"
    assert top_level == []
