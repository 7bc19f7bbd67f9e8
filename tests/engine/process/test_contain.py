"""A workload given as an import string runs contained, in one worker process
(``_engine/process/contain.py``): ``os._exit``, a segfault or a hang (with ``--timeout``) in its code is a
failure that names it, exit 1, with the report printed; a healthy one passes with the report it has in process
(timings aside).

The misbehaving callables are ``tests/support/usercode.py``'s (``usercode:generate_dies``, ...).
"""

from __future__ import annotations

import importlib.util
import json
import signal
import textwrap

import numpy as np
import pytest

import crosscheck
from crosscheck._cli.main import main
from crosscheck._report.wire import from_wire, to_wire

#: A user's module: a healthy workload and its gradient, a wrong gradient, and a workload whose
#: ``generate`` ends its process when ``W23_DIE`` is set (to replay a bundle with).
MODULE = """
import os
import numpy as np
import crosscheck

def _loss(p, i):
    return float(np.sum((i["x"] @ p["w"]) ** 2))

def grad(p, i):
    return {"w": 2 * i["x"].T @ (i["x"] @ p["w"])}

def half_grad(p, i):
    return {"w": i["x"].T @ (i["x"] @ p["w"])}

def _generate(rng, dtype):
    if os.environ.get("W23_DIE"):
        os._exit(0)
    return {"w": rng.standard_normal((3, 2)).astype(dtype)}, {"x": rng.standard_normal((4, 3)).astype(dtype)}

good = crosscheck.Workload(name="good", parameters={"w": (3, 2)}, inputs={"x": (4, 3)}, reference=_loss)
dies = crosscheck.Workload(
    name="dies", parameters={"w": (3, 2)}, inputs={"x": (4, 3)}, reference=_loss, generate=_generate
)
"""


@pytest.fixture
def user_dir(tmp_path, monkeypatch):
    (tmp_path / "contained_mod.py").write_text(textwrap.dedent(MODULE))
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def _failed(argv, capsys, tmp_path):
    """Run ``argv`` with ``--json``: (exit status, the printed report in one line, the JSON report)."""
    status = main([*argv, "--json", str(tmp_path / "r.json")])
    out = " ".join(capsys.readouterr().out.split())
    return status, out, json.loads((tmp_path / "r.json").read_text())


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("usercode:generate_dies", "its worker process died with exit status 0 (os._exit or a crash in"),
        ("usercode:generate_crashes", "its worker process was killed by SIGSEGV (a crash or an abort in"),
    ],
    ids=["os._exit", "segfault"],
)
def test_a_workload_that_ends_its_process_fails_and_is_named(spec, says, capsys, tmp_path):
    junit, bundle = tmp_path / "r.xml", tmp_path / "b.npz"
    argv = ["run", "--workload", spec, "--junit", str(junit), "--save-bundle", str(bundle)]
    status, out, report = _failed(argv, capsys, tmp_path)
    assert status == 1
    assert f"FAILED: workload `{spec}`: {says}" in out
    assert "Traceback" not in out
    assert report["passed"] is False and report["halted"] == report["problems"][0]
    assert report["halted"].startswith(f"workload `{spec}`: ") and report["comparisons"] == []
    # The JUnit file fails too (no backend ran, so the run is its one case); no bundle (no inputs).
    assert 'errors="1"' in junit.read_text() and says in junit.read_text()
    assert not bundle.exists()


@pytest.mark.skipif(
    importlib.util.find_spec("torch") is None or importlib.util.find_spec("flax") is None,
    reason="a port needs torch and flax",
)
def test_os_exit_in_a_ports_inputs_fails_and_names_the_port(capsys, tmp_path):
    argv = ["run", "--workload", "usercode:inputs_dies", "--reference", "torch"]
    status, out, _ = _failed(argv, capsys, tmp_path)
    assert status == 1
    assert "FAILED: workload `usercode:inputs_dies`: its worker process died with exit status 0" in out


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        (
            "usercode:generate_hangs",
            "workload `w`: `generate(rng, dtype)` did not finish within 5 s (the timeout)",
        ),
        ("usercode:generate_holds", "its worker process said nothing for 7 s (a hang holding the GIL"),
    ],
    ids=["python-loop", "holding-the-GIL"],
)
def test_a_hang_with_a_timeout_fails_and_names_the_workload(spec, says, capsys, tmp_path):
    status, out, _ = _failed(["run", "--workload", spec, "--timeout", "5"], capsys, tmp_path)
    assert status == 1
    assert f"FAILED: workload `{spec}`: {says}" in out


def test_a_ctrl_c_reaches_the_worker_and_the_run_says_so(capsys, tmp_path):
    # The workload's generate presses Ctrl-C in this process (SIGINT to its parent), then hangs: this
    # process forwards it to the worker, which stops; the report says interrupted, exit 130.
    # A shell without job control starts background commands with SIGINT ignored, and Python then
    # keeps it so: the Ctrl-C would never reach this process (the run would wait forever).
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        status, out, report = _failed(["run", "--workload", "usercode:generate_interrupts"], capsys, tmp_path)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert status == 130
    assert "workload `usercode:generate_interrupts`: interrupted (Ctrl-C) while loading the workload" in out
    assert report["interrupted"] is True


def _without_timings(value):
    """A JSON report without its timings, the note that says where a backend ran (in process with
    ``--no-isolate``, in a worker of its own otherwise) and the environment (the frameworks imported in
    the process that ran the check: this test process has imported others' before)."""
    if isinstance(value, dict):
        skip = ("seconds", "isolated", "environment")
        return {k: _without_timings(v) for k, v in value.items() if k not in skip}
    if isinstance(value, list):
        return [_without_timings(v) for v in value]
    return value


def test_a_healthy_workload_passes_in_its_worker_with_the_report_it_has_in_process(
    user_dir, capsys, monkeypatch
):
    from crosscheck._engine.process import contain

    waits = []  # how long the parent waits for the worker to exit once it has the report: not at all
    close = contain._Watch.close
    monkeypatch.setattr(
        contain._Watch, "close", lambda self, wait=0.0: waits.append(wait) or close(self, wait)
    )
    argv = ["run", "--workload", "contained_mod:good", "--backend", "contained_mod:grad"]
    assert main([*argv, "--json", "contained.json"]) == 0
    assert waits == [0.0]
    contained_out = capsys.readouterr().out
    assert main([*argv, "--json", "here.json", "--no-isolate"]) == 0
    here_out = capsys.readouterr().out
    contained, here = (json.loads((user_dir / f"{n}.json").read_text()) for n in ("contained", "here"))
    assert contained["passed"] and _without_timings(contained) == _without_timings(here)
    # The same report printed, line for line, but for the time column.
    assert [line.split("│")[1:3] for line in contained_out.splitlines()] == [
        line.split("│")[1:3] for line in here_out.splitlines()
    ]
    assert contained_out.splitlines()[-1] == here_out.splitlines()[-1]


def test_the_python_api_contains_an_import_string_and_shows_progress(user_dir):
    seen = []
    given = {"workload": "contained_mod:good", "backends": ["contained_mod:grad"]}
    contained = crosscheck.run(**given, progress=lambda *update: seen.append(update))
    here = crosscheck.run(**given, isolate=False)
    assert contained.passed and seen, "no progress came back from the worker"
    assert _without_timings(contained.to_dict()) == _without_timings(here.to_dict())
    died = crosscheck.check("usercode:generate_dies")
    assert not died.passed and died.problems[0].startswith("workload `usercode:generate_dies`: its worker")


def test_replay_trust_contains_the_workload(user_dir, capsys, monkeypatch):
    argv = ["run", "--workload", "contained_mod:dies", "--backend", "contained_mod:half_grad"]
    assert main([*argv, "--save-bundle", "b.npz"]) == 1
    monkeypatch.setenv("W23_DIE", "1")  # the worker inherits it: the workload's generate now dies
    capsys.readouterr()
    assert main(["replay", "b.npz", "--trust"]) == 1
    out = " ".join(capsys.readouterr().out.split())
    assert "failed: workload `contained_mod:dies`: its worker process died with exit status 0" in out
    assert "NOT REPRODUCED" in out


def test_a_report_crosses_as_data_and_back():
    report = crosscheck.Report(
        case={"workload": "w", "index": (1, 2), 3: np.float32(0.5)},
        backends={},
        comparisons=[],
        reference="numpy-fd",
        gradients={"jax": {"w": np.arange(6.0).reshape(2, 3)}},
    )
    back = from_wire(to_wire(report))
    assert back.case == report.case and type(back.case[3]) is np.float32
    assert np.array_equal(back.gradients["jax"]["w"], report.gradients["jax"]["w"])
    with pytest.raises(TypeError, match="cannot carry a object"):
        to_wire(object())
    with pytest.raises(ValueError, match="must be crosscheck's own"):
        from_wire({"section": ["os", "system", "after"]})
