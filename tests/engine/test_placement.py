"""Where the guarded calls put each side (``crosscheck._engine.placement``, the engine's ``Caller``): the
run's placement, one record per framework, applied by that framework's folder inside each call
(``state.placed``) and read back there (``environment.arithmetic()``), undone after it; ``on_host`` asks
each framework for its own host values. A framework that declares a placement reaches the engine with
no edit of it: a toy one, in a copy of the package, is applied, moved to the host, recorded and offered
on the command line by the same code.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from copied import copy_with, run_child

from crosscheck._backends import placements
from crosscheck._backends.placement import Placement, Setting
from crosscheck._engine.call import placed
from crosscheck._engine.caller import Caller


def test_on_host_moves_each_side_to_the_host_cpu_for_a_while_and_keeps_its_arithmetic():
    call = Caller({}, placement=placements({"jax_precision": "high"}))
    with call.on_host():
        on_host = {"jax_platform": "cpu", "jax_precision": "high", "torch_device": "cpu"}
        assert call.placement == placements(on_host)
    assert call.placement == placements({"jax_precision": "high"})


def test_on_host_without_a_placement_is_the_host_at_every_default():
    call = Caller({})
    with call.on_host():
        assert call.placement == placements({"jax_platform": "cpu", "torch_device": "cpu"})
    assert call.placement == ()


def test_a_placement_left_alone_imports_no_framework():
    """Every setting at its default: the framework is left as it is, and not imported for it."""
    code = """
        import sys
        from crosscheck._backends import placements
        from crosscheck._engine.call import placed
        with placed(placements()):
            pass
        print(sorted(m for m in ("jax", "torch") if m in sys.modules))
    """
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"


def test_a_placement_of_a_framework_nobody_declared_fails_in_words():
    """A record the engine cannot apply is never dropped (a check that did not happen must fail)."""
    record = Placement("nowhere", (Setting("device", ("default", "gpu"), "where"),), {"device": "gpu"})
    with pytest.raises(ValueError, match="framework `nowhere`, which is not declared"), placed((record,)):
        pass


def test_a_jax_record_is_applied_inside_each_call_and_read_back_there():
    jax = pytest.importorskip("jax")
    from crosscheck._compare.device import arithmetic
    from crosscheck.backends.jax import environment

    call = Caller({}, placement=placements({"jax_platform": "cpu", "jax_precision": "highest"}))
    out = call(lambda: (environment.arithmetic(), jax.config.jax_default_device is not None))
    read, on_the_cpu_by_choice = out.value
    assert (read.framework, read.platform, read.precision) == ("jax", "cpu", "highest")
    assert on_the_cpu_by_choice and "state_changed" not in out.notes  # the run's, not the backend's
    assert jax.config.jax_default_matmul_precision is None and jax.config.jax_default_device is None

    class Side:
        arithmetic = staticmethod(environment.arithmetic)

    assert arithmetic(Side(), call).precision == "highest"  # read under the run's placement
    assert arithmetic(Side()).precision == "default"  # the process's own


#: A toy framework that declares a placement: where its side runs and how it rounds.
TOY = {
    "__init__.py": """
        from crosscheck._backends import Framework
        from crosscheck._backends.placement import Setting

        FRAMEWORK = Framework(
            name="toy",
            modules=("toylib",),
            extra="toy",
            backends={"toy": "ToyBackend"},
            defaults=(),
            workload="ToyWorkloadBackend",
            plain="toy",
            title="Toy",
            placement=(
                Setting("device", ("default", "cpu", "gpu"), "where the toy side runs", host="cpu"),
                Setting("rounding", ("default", "fast", "exact"), "how it rounds", highest="exact"),
            ),
        )
        """,
    "state.py": """
        import contextlib
        import sys

        DEFAULTS = {"toy device": "gpu", "toy rounding": "fast"}


        def read():
            return {f"toy {k}": v for k, v in sys.modules["toylib"].STATE.items()}


        def write(key, value):
            sys.modules["toylib"].STATE[key.removeprefix("toy ")] = value


        @contextlib.contextmanager
        def placed(placement):
            import toylib

            before = dict(toylib.STATE)
            toylib.STATE.update({k: v for k, v in placement.values.items() if v != "default"})
            try:
                yield
            finally:
                toylib.STATE.update(before)
        """,
}
TOYLIB = """
    STATE = {"device": "gpu", "rounding": "fast"}
    """

CHILD = """
    import contextlib, io, json
    import toylib
    from crosscheck._backends import as_options, placements
    from crosscheck._backends.placement import Placement
    from crosscheck._cli.main import main
    from crosscheck._engine.caller import Caller
    from crosscheck._replay.rerun import recorded_placement
    from crosscheck._report.report import Report
    from crosscheck._sweep.config import SCHEMA

    placement = placements({"toy_device": "cpu", "toy_rounding": "fast"})
    call = Caller({}, placement=placement)
    inside = call(lambda: dict(toylib.STATE))
    with call.on_host():
        host = call(lambda: dict(toylib.STATE)).value
    highest = [as_options(p.at_highest() for p in placement), as_options(p.on_host() for p in placement)]
    report = Report(case={}, backends={}, comparisons=[], reference="x", environment={},
                    placement=as_options(placement)).to_dict()
    helped = io.StringIO()
    with contextlib.redirect_stdout(helped), contextlib.suppress(SystemExit):
        main(["run", "--help"])
    print(json.dumps({
        "inside": inside.value, "notes": inside.notes, "after": toylib.STATE, "host": host,
        "highest": highest, "json": {k: v for k, v in report.items() if k.endswith("_settings")},
        "replayed": as_options(recorded_placement(report)),
        "help": " ".join(helped.getvalue().split()), "config": "toy_device" in SCHEMA,
    }))
    """


def test_a_framework_that_declares_a_placement_reaches_the_engine_unedited(tmp_path):
    copy_with(tmp_path, "toy", TOY, {"toylib.py": TOYLIB})
    found = run_child(tmp_path, CHILD)
    assert found["inside"] == {"device": "cpu", "rounding": "fast"}  # applied by backends/toy/state.py
    assert "state_changed" not in found["notes"]  # undone after the call, never the backend's change
    assert found["after"] == {"device": "gpu", "rounding": "fast"}
    assert found["host"] == {"device": "cpu", "rounding": "fast"}
    at_highest, on_host = found["highest"]
    assert at_highest["toy_rounding"] == "exact" and at_highest["toy_device"] == "cpu"
    assert on_host["toy_device"] == "cpu" and at_highest["jax_precision"] == "highest"
    assert found["json"]["toy_settings"] == {"toy_device": "cpu", "toy_rounding": "fast"}
    assert found["json"]["jax_settings"] == {
        "jax_platform": "default",
        "jax_precision": "default",
        "jax_deterministic": "default",
    }
    assert found["replayed"]["toy_device"] == "cpu"
    assert "--toy-device {default,cpu,gpu} where the toy side runs" in found["help"]
    assert found["config"] is True
