"""One front door (``_engine/request.py``, ``_engine/execute.py``): every entry path builds one ``Request``
and calls ``execute``; the API and the CLI refuse the same things with the same words, each option
spelled as its front door spells it; a contained run's worker runs the engine's one job, which runs
the request there."""

from __future__ import annotations

import dataclasses
import re
import sys
import typing

import numpy as np
import pytest
from messages import crossed

import crosscheck
from crosscheck._cli.main import main
from crosscheck._engine import execute
from crosscheck._engine.process import contain
from crosscheck._engine.process.contain_worker import _job
from crosscheck._engine.request import Request
from crosscheck._replay import replay as replay_verb
from crosscheck._replay.replay import Replay, replay
from crosscheck._report.bundle import load_bundle, save_bundle
from crosscheck._sweep.task import make_tasks, run_task
from crosscheck.testing import assert_gradients_close

#: The smallest stack, checked by the oracle against itself: no framework imported.
SMALL = {"layers": 2, "batch": 2, "dim": 2}


@pytest.fixture
def requests(monkeypatch):
    """The requests ``execute`` is called with, in this process (a spy on its first step)."""
    seen: list[Request] = []
    checked = execute._checked

    def spy(request):
        seen.append(request)
        return checked(request)

    monkeypatch.setattr(execute, "_checked", spy)
    return seen


def _bundle(tmp_path):
    report = crosscheck.run(**SMALL, backends=["numpy-fd"], isolate=False)
    save_bundle(report, tmp_path / "b.npz")
    return load_bundle(tmp_path / "b.npz")


ENTRIES = {
    "check": lambda tmp: crosscheck.check(crosscheck.Stack(**SMALL), backends=["numpy-fd"]),
    "run": lambda tmp: crosscheck.run(**SMALL, backends=["numpy-fd"]),
    "cli-run": lambda tmp: main(["run", *_argv(SMALL), "--backend", "numpy-fd", "--quiet", "--no-isolate"]),
    "cli-explain": lambda tmp: main(["explain", *_argv(SMALL), "--backend", "numpy-fd", "--quiet"]),
    "sweep": lambda tmp: run_task(make_tasks([SMALL], {"backends": ["numpy-fd"]})[0]),
    "pytest-helper": lambda tmp: assert_gradients_close(crosscheck.Stack(**SMALL), backends=["numpy-fd"]),
}


def _argv(knobs):
    return [f"--{k}={v}" for k, v in knobs.items()]


@pytest.mark.parametrize("entry", list(ENTRIES), ids=list(ENTRIES))
def test_every_entry_path_builds_one_request_and_calls_execute(entry, requests, tmp_path):
    ENTRIES[entry](tmp_path)
    assert len(requests) == 1, [r.workload for r in requests]
    assert requests[0].front == ("cli" if entry.startswith("cli") else "api")
    assert isinstance(requests[0], Request)


def test_replay_is_a_verb_of_its_own_with_its_own_record(requests, tmp_path, monkeypatch, capsys):
    # A replay builds one ``Replay`` and runs it (``run_replay``), never a check's ``execute``; a
    # ``Request`` holds checks only.
    bundle = _bundle(tmp_path)
    requests.clear()
    replays: list[Replay] = []
    ran = replay_verb.run_replay

    def spy(record):
        replays.append(record)
        return ran(record)

    monkeypatch.setattr(replay_verb, "run_replay", spy)
    rows = replay(bundle, isolate=False)
    assert [r["status"] for r in rows] == ["bit for bit", "bit for bit"]
    assert len(replays) == 1 and replays[0].bundle is bundle and requests == []
    replays.clear()
    assert main(["replay", str(tmp_path / "b.npz"), "--no-isolate"]) == 0  # the CLI's replay too
    assert len(replays) == 1 and replays[0].bundle is not None and requests == []
    assert not {"bundle", "trust"} & {f.name for f in dataclasses.fields(Request)}


def test_a_contained_check_sends_its_request_to_the_engines_one_job(requests, tmp_path, monkeypatch, capsys):
    # The parent builds the request and calls execute, which hands the request, as data, to the engine's
    # job (never the CLI's); the worker's job runs it there (here: in this process; a job that asked for
    # yet another worker would never end), and sends the plan's outlook back as data for the CLI's note.
    # Where it runs is the job's to know: the request carries no worker state, and is checked once, in
    # the parent.
    (tmp_path / "small_workload.py").write_text(WORKLOAD)
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    monkeypatch.delitem(sys.modules, "small_workload", raising=False)
    jobs = []

    def worker(job, data, *, timeout, progress, announce=None, env=None):
        jobs.append(job)
        assert set(data) == {f.name for f in dataclasses.fields(Request)}  # the request, nothing more
        assert env == {}  # no setting asks for a variable the worker must start with
        return execute.job(crossed(data), progress=progress, announce=announce)

    monkeypatch.setattr(contain, "contained", worker)
    monkeypatch.setattr("crosscheck._cli.run.MEMORY_NOTE_BYTES", 1)
    argv = ["run", "--workload", "small_workload:lin", "--backend", "small_workload:grad", "--quiet"]
    assert main(argv) == 0
    assert "crosscheck: this case needs about " in capsys.readouterr().err
    report = crosscheck.run(workload="small_workload:lin", backends=["small_workload:grad"], repeat=1)
    assert report.passed
    assert jobs == [execute.JOB, execute.JOB] and execute.JOB == "crosscheck._engine.execute:job"
    assert [(r.workload, r.front) for r in requests] == [
        ("small_workload:lin", "cli"),
        ("small_workload:lin", "api"),
    ]
    assert "contained" not in {f.name for f in dataclasses.fields(Request)}


WORKLOAD = """
import numpy as np
import crosscheck

def _loss(p, i):
    return float(np.sum((i["x"] @ p["w"]) ** 2))

def grad(p, i):
    y = i["x"] @ p["w"]
    return {"w": 2 * i["x"].T @ y}

lin = crosscheck.Workload(name="lin", parameters={"w": (3, 2)}, inputs={"x": (4, 3)}, reference=_loss)
"""


# -- the API and the CLI refuse the same things, with the same words ------------------------------------

W, X = np.ones((2, 3, 3)), np.ones((4, 3))

#: (CLI arguments, ``run``'s keywords, the CLI's message, the API's): one rule, one template.
REFUSED = {
    "directions-full": (
        ["--directions", "8", "--oracle-mode", "full"],
        {"directions": 8, "oracle_mode": "full"},
        "`--directions` applies to screening (`--oracle-mode screen` or `auto`); `--oracle-mode full` "
        "never screens.",
        "`directions` applies to screening (`oracle_mode='screen'` or `auto`); `oracle_mode='full'` "
        "never screens.",
    ),
    "directions-outputs": (
        ["--directions", "8", "--oracle-mode", "outputs"],
        {"directions": 8, "oracle_mode": "outputs"},
        "`--directions` applies to screening (`--oracle-mode screen` or `auto`); `--oracle-mode outputs` "
        "never screens.",
        "`directions` applies to screening (`oracle_mode='screen'` or `auto`); `oracle_mode='outputs'` "
        "never screens.",
    ),
    "stack-only": (
        ["--workload", "ste-stack", "--weights", "w.npy", "--x", "x.npy"],
        {"workload": "ste-stack", "weights": W, "x": X},
        "`--weights` applies to the stack workload only; workload `ste-stack` defines its own arrays "
        "(it takes --dtype and --seed).",
        "`weights` applies to the stack workload only; workload `ste-stack` defines its own arrays "
        "(it takes dtype and seed).",
    ),
    "steps": (
        ["--steps", "2"],
        {"steps": 2},
        "`--quantity update` and `--steps` go together with a crosscheck.Train workload (a port and an "
        "optimizer on each side); workload `stack` checks grad, hvp.",
        "`quantity='update'` and `steps` go together with a crosscheck.Train workload (a port and an "
        "optimizer on each side); workload `stack` checks grad, hvp.",
    ),
    "weights-alone-elsewhere": (  # the arrays' rule first, before the workload is loaded, on both
        ["--workload", "ste-stack", "--weights", "w.npy"],
        {"workload": "ste-stack", "weights": W},
        "`--weights` and `--x` must be given together; found only `--weights`.",
        "`weights` and `x` must be given together; found only `weights`.",
    ),
    "rtol-alone": (
        ["--rtol", "1e-3"],
        {"rtol": 1e-3},
        "`--rtol` and `--atol` must be given together or not at all; found only `--rtol`.",
        "`rtol` and `atol` must be given together or not at all; found only `rtol`.",
    ),
    "budget": (
        ["--budget", "0"],
        {"budget": 0.0},
        "`--budget` must be a positive number of seconds, found 0.0.",
        "`budget` must be a positive number of seconds, found 0.0.",
    ),
    "weights-alone": (
        ["--weights", "w.npy"],
        {"weights": W},
        "`--weights` and `--x` must be given together; found only `--weights`.",
        "`weights` and `x` must be given together; found only `weights`.",
    ),
    "weights-and-knob": (
        ["--weights", "w.npy", "--x", "x.npy", "--layers", "3"],
        {"weights": W, "x": X, "layers": 3},
        "`--layers` cannot be combined with `--weights/--x`: the arrays determine the case.",
        "`layers` cannot be combined with `weights/x`: the arrays determine the case.",
    ),
    "weights-and-seed": (
        ["--weights", "w.npy", "--x", "x.npy", "--seed", "3"],
        {"weights": W, "x": X, "seed": 3},
        "`--seed` cannot be combined with `--weights/--x`: the arrays determine the case.",
        "`seed` cannot be combined with `weights/x`: the arrays determine the case.",
    ),
}


@pytest.mark.parametrize("case", list(REFUSED), ids=list(REFUSED))
def test_the_api_and_the_cli_refuse_the_same_things(case, tmp_path, monkeypatch, capsys):
    argv, keywords, cli_message, api_message = REFUSED[case]
    monkeypatch.chdir(tmp_path)
    np.save("w.npy", W)
    np.save("x.npy", X)
    assert main(["run", *argv, "--backend", "numpy-fd", "--no-isolate"]) == 2
    assert capsys.readouterr().err == f"crosscheck: error: {cli_message}\n"
    with pytest.raises(ValueError, match=f"^{re.escape(api_message)}$"):
        crosscheck.run(**keywords, backends=["numpy-fd"], isolate=False)


def test_a_contained_runs_note_comes_back_from_its_worker(tmp_path, monkeypatch, capsys):
    # A real worker process: the outlook crosses the pipe as an "announce" message, and the parent's
    # CLI prints the note (the worker prints nothing of its own).
    (tmp_path / "small_workload.py").write_text(WORKLOAD)
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    monkeypatch.setattr("crosscheck._cli.run.MEMORY_NOTE_BYTES", 1)
    argv = ["run", "--workload", "small_workload:lin", "--backend", "small_workload:grad", "--quiet"]
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert err.count("crosscheck: this case needs about ") == 1, err


@pytest.mark.parametrize(
    "job", ["crosscheck._cli.run:run", "os:system", "crosscheck.testing:failure_message"]
)
def test_a_worker_runs_the_engines_job_only(job):
    # The engine may not import the CLI (the layers): a worker loading it by string went past that.
    with pytest.raises(RuntimeError, match="a contained run's job must be crosscheck's own"):
        _job(job)
    assert _job(execute.JOB) is execute.job
    assert _job(replay_verb.JOB) is replay_verb.job


def test_the_seams_are_typed_with_their_protocols():
    # The engine's seams say what passes through them (mypy holds the implementations to it): a check
    # returns a Report, a workload is an EngineWorkload, a judge's answer an Outcome, a candidate a
    # BackendSpec; none of them Any.
    from crosscheck._engine.plan import Plan
    from crosscheck._engine.request import configure
    from crosscheck._report.report import Report
    from crosscheck._workloads.protocol import EngineWorkload, Judge, Outcome
    from crosscheck._workloads.registry import load_workload

    assert typing.get_type_hints(execute.execute)["return"] is Report
    assert typing.get_type_hints(load_workload)["return"] is EngineWorkload
    hints = typing.get_type_hints(configure)
    assert hints["workload"] is hints["return"] is EngineWorkload
    assert typing.get_type_hints(Judge.reference)["return"] is Outcome
    assert typing.get_type_hints(Judge.evaluate)["return"] is Outcome
    plan_hints = typing.get_type_hints(Plan)
    spec = plan_hints["reference"]
    assert plan_hints["candidates"] == list[spec] and spec is not typing.Any
