"""The guarded call, path by path: every way a backend misbehaves, on every path that calls a backend.

One table, ``CELLS``: (path, behaviour). A path is a way crosscheck calls backends (the stack's gradient
and HVP, a user's workload, ``ste-stack``, a sweep case in process and in a worker,
``assert_gradients_close``, ``replay`` (a bundle saved before the backend misbehaves, and
``replay-failed``: one saved after it failed in the run), ``list``, an entry-point plugin, the default
run with its import strings in worker processes); a behaviour is one hostile backend of
``tests/support/hostile.py``. The
documented outcome (README "Exit status", design.md "Contracts"): a behaviour in ``FAILS`` makes its
backend ``failed`` with a one-line error containing the phrase, every other backend still runs and
passes, the run fails (exit 1); one in ``NOT_FAILURES`` is no failure (status ``ok``, its comparison
passes, exit 0) and leaves what ``check_ok`` says. The hostile backend is named first, so a leak
(state, a write to the inputs) would reach the backends after it.

Most cells run in this process, on a tiny case (``CASE``); subprocesses only for the sweep's worker
(one sweep, every hostile backend in one case), the default run's workers, the plugin install (once)
and the real Ctrl-C.
"""

from __future__ import annotations

import dataclasses
import json
import signal
import subprocess
import sys
from pathlib import Path

import hostile
import numpy as np
import processes
import pytest
from paths import PLUGINS

import crosscheck
from crosscheck._cli.main import main
from crosscheck.testing import assert_gradients_close

PLUGIN_PACKAGES = [PLUGINS / "crosscheck-plugin-broken", PLUGINS / "crosscheck-plugin-hostile"]
CASE = {"layers": 3, "batch": 4, "dim": 4, "seed": 1}
SMALL = ["--layers", "3", "--batch", "4", "--dim", "4", "--seed", "1"]
BROKEN = "broken-import"  # tests/plugins/crosscheck-plugin-broken: its module's import fails

#: Behaviour -> the phrase its backend's one-line error must contain.
FAILS = {
    "none": "returned None",
    "raises": "ValueError: boom",
    "exit": "SystemExit",
    "kbint": "KeyboardInterrupt",
    "not_array": "not an array",
    "float16": "float16",
    "writes": "modified its inputs",
    "negzero": "modified its inputs",
    "accumulates": "second call differs",
    "noisy": "second call differs",
    "broken_plugin": "failed to load",
    # Entry points of tests/plugins/crosscheck-plugin-hostile (path "plugin"):
    "none_grad": "returned None",
    "none_factory": "failed to load",
}
#: Behaviours that are no failure: the backend is ok and passes (``check_ok`` says what else holds).
#: ``repeat1``: the accumulating backend with ``repeat=1``, whose one call is right.
NOT_FAILURES = ("requires_grad", "markup", "seterr", "torch_precision", "jax_precision", "repeat1")
STATE = ("seterr", "torch_precision", "jax_precision")
#: Part of what each state-changing backend's ``notes["state_changed"]`` must say it changed.
STATE_NOTE = {"seterr": "numpy error state", "torch_precision": "torch", "jax_precision": "jax"}

STACK = [
    *("none", "raises", "exit", "kbint", "requires_grad", "not_array", "float16", "markup"),
    *("writes", "negzero", "seterr", "torch_precision", "jax_precision", "noisy", "accumulates"),
    "repeat1",
    "broken_plugin",
]
#: Workloads: `output_dtype` is a stack backend's attribute (a workload's dtype is per parameter).
WORKLOAD = [b for b in STACK if b != "float16"]
#: ste-stack: its generated arrays (gaussian) hold no exact 0.0 for a -0.0 write to go over.
STE = [b for b in WORKLOAD if b != "negzero"]
#: Sweeps: `--repeat` is an option of `crosscheck run`; a broken plugin is checked on the run paths
#: (grad, HVP, workloads), which a sweep case calls.
SWEEP = [b for b in STACK if b not in ("repeat1", "broken_plugin")]
#: Replay: re-runs each backend once on the bundle's arrays and compares bits: no repeat, so no
#: accumulation; float16 against a saved float32 gradient is a `differs` row by design; a name is moot
#: (the table shows the bundle's text); the bundle records no broken plugin (it never computed).
REPLAY = [
    b for b in STACK if b not in ("float16", "markup", "noisy", "accumulates", "repeat1", "broken_plugin")
]
#: Replay of a bundle whose hostile backend already failed in the run (saved armed): the bundle holds no
#: value of it, and its row must say "failed originally" (and what it does now), never vanish from a
#: replay that passes. `os_exit` runs in a worker, in the run and in the replay.
REPLAY_FAILED = [*(b for b in REPLAY if b in FAILS), "os_exit"]
#: The default run (`--isolate` unset): every import string in its own worker process (`repeat1` is a
#: run option; a broken plugin is checked in process).
ISOLATED = SWEEP
#: Paths on which one run holds every hostile backend at once.
SHARED = ("sweep-worker", "cli-auto")

CELLS = [
    *[("run-grad", b) for b in STACK],
    *[("cli-grad", b) for b in STACK],
    *[("run-hvp", b) for b in STACK],
    *[("cli-hvp", b) for b in STACK],
    *[("run-tiny", b) for b in WORKLOAD],
    *[("cli-ste", b) for b in STE],
    *[("sweep-inprocess", b) for b in SWEEP],
    *[("sweep-worker", b) for b in SWEEP],
    *[("cli-auto", b) for b in ISOLATED],
    *[("assert", b) for b in STACK],
    *[("replay", b) for b in REPLAY],
    *[("replay-failed", b) for b in REPLAY_FAILED],
    ("list", "exit_factory"),
    ("list", "exit_info"),
    ("plugin", "none_grad"),
    ("plugin", "none_factory"),
]


@dataclasses.dataclass
class Outcome:
    """What one cell observed: the JSON report (a sweep: its case's), the exit status (None in Python),
    what was printed, and the hostile backend's name in the report."""

    name: str
    report: dict | None = None
    status: int | None = None
    out: str = ""
    record: dict | None = None  # a sweep's case record
    message: str | None = None  # assert_gradients_close's AssertionError
    rows: dict[str, str] | None = None  # replay: backend -> its table line


# -- fixtures -------------------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _isolated(monkeypatch):
    """A wide terminal (no table cell wraps or truncates), and whatever global state a hostile backend
    leaked put back after the test, so that one leak fails its own cell only."""
    monkeypatch.setenv("COLUMNS", "250")
    import torch

    saved = np.geterr(), torch.get_float32_matmul_precision()
    jax_saved = sys.modules["jax"].config.jax_default_matmul_precision if "jax" in sys.modules else None
    yield
    np.seterr(**saved[0])
    torch.set_float32_matmul_precision(saved[1])
    if "jax" in sys.modules:
        sys.modules["jax"].config.update("jax_default_matmul_precision", jax_saved)
    hostile.ARMED = True  # a replay cell disarms them for its first run


@pytest.fixture(scope="module")
def plugin_site(tmp_path_factory) -> Path:
    """A folder into which pip installed the broken and the hostile plugin packages (offline)."""
    pytest.importorskip("hatchling", reason="the plugins' build backend (in the `test` extra)")
    site = tmp_path_factory.mktemp("site")
    command = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation"]
    command += ["--no-index", "--target", str(site), *map(str, PLUGIN_PACKAGES)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr
    return site


@pytest.fixture
def plugins(plugin_site, monkeypatch):
    monkeypatch.syspath_prepend(str(plugin_site))
    yield plugin_site
    for module in [m for m in sys.modules if m.startswith("crosscheck_plugin_")]:
        del sys.modules[module]


def guarded(fn, *args, **kwargs):
    """``fn(...)``; a SystemExit or KeyboardInterrupt escaping crosscheck fails the test (and only it)."""
    try:
        return fn(*args, **kwargs)
    except (SystemExit, KeyboardInterrupt) as exc:
        pytest.fail(f"{type(exc).__name__}({exc}) escaped from crosscheck", pytrace=False)


def _cli(argv: list[str], capsys) -> tuple[int, str]:
    capsys.readouterr()
    status = guarded(main, argv)
    captured = capsys.readouterr()
    return status, captured.out + captured.err


# -- the hostile backend of a cell ----------------------------------------------------------------------


def _kind(behaviour: str) -> str:
    return "accumulates" if behaviour == "repeat1" else behaviour


def _name(shape: str, behaviour: str) -> str:
    return BROKEN if behaviour == "broken_plugin" else hostile.name(shape, _kind(behaviour))


def _specs(shape: str, behaviour: str, request) -> list[str]:
    """Import strings (or the plugin's name) of the cell's backends: the hostile one first, then (for a
    write) a witness that fails on inputs carrying the write, then torch."""
    if behaviour == "broken_plugin":
        request.getfixturevalue("plugins")
        return [BROKEN, "torch"]
    witness = [f"hostile:{shape}_witness"] if behaviour in ("writes", "negzero") else []
    return [f"hostile:{shape}_{_kind(behaviour)}", *witness, "torch"]


def _objects(shape: str, behaviour: str, request) -> list:
    """The same backends as objects (the Python paths pass objects; the CLI passes import strings)."""
    specs = _specs(shape, behaviour, request)
    return [hostile.make(*spec[8:].split("_", 1)) if spec.startswith("hostile:") else spec for spec in specs]


def _case_options(behaviour: str) -> dict:
    # An identity case: its weights' off-diagonal entries are exact 0.0s for the -0.0 write to go over,
    # and no pre-activation sits on a kink (an integer case's HVP entries are all unjudgeable).
    options = {"init": "identity"} if behaviour == "negzero" else {}
    return {**options, "repeat": 1} if behaviour == "repeat1" else options


def _case_argv(behaviour: str) -> list[str]:
    options = _case_options(behaviour)
    return [f"--{k}={v}" for k, v in options.items()]


# -- the paths: each runs one cell and returns its Outcome -----------------------------------------------


def run_python(shape: str, quantity: str):
    def runner(behaviour, request, tmp_path, capsys):
        backends = _objects(shape, behaviour, request)
        report = guarded(
            crosscheck.run, **CASE, backends=backends, quantity=quantity, **_case_options(behaviour)
        )
        return Outcome(_name(shape, behaviour), report=report.to_dict())

    return runner


def run_cli(shape: str, quantity: str):
    def runner(behaviour, request, tmp_path, capsys):
        path = tmp_path / "report.json"
        argv = ["run", *SMALL, "--quantity", quantity, *_case_argv(behaviour), "--json", str(path)]
        argv += ["--no-isolate"]  # the guarded call in process (path cli-auto: in worker processes)
        for spec in _specs(shape, behaviour, request):
            argv += ["--backend", spec]
        status, out = _cli(argv, capsys)
        assert path.is_file(), f"no --json report (exit {status}): {out}"
        return Outcome(_name(shape, behaviour), report=json.loads(path.read_text()), status=status, out=out)

    return runner


def run_tiny(behaviour, request, tmp_path, capsys):
    backends = _objects("tiny", behaviour, request)
    options = {k: v for k, v in _case_options(behaviour).items() if k == "repeat"}
    report = guarded(
        crosscheck.run, workload=hostile.TINY, dtype="float64", seed=1, backends=backends, **options
    )
    return Outcome(_name("tiny", behaviour), report=report.to_dict())


def run_ste(behaviour, request, tmp_path, capsys):
    path = tmp_path / "report.json"
    argv = ["run", "--workload", "ste-stack", "--seed", "1", "--json", str(path), "--no-isolate"]
    argv += ["--repeat", "1"] if behaviour == "repeat1" else []
    for spec in _specs("ste", behaviour, request):
        argv += ["--backend", spec]
    status, out = _cli(argv, capsys)
    assert path.is_file(), f"no --json report (exit {status}): {out}"
    return Outcome(_name("ste", behaviour), report=json.loads(path.read_text()), status=status, out=out)


def _sweep(argv: list[str], path: Path) -> tuple[int, dict]:
    status = guarded(main, ["sweep", *SMALL, *argv, "--json", str(path)])
    assert path.is_file(), f"no --json report (exit {status})"
    (record,) = json.loads(path.read_text())["cases"]
    return status, record


def run_sweep_inprocess(behaviour, request, tmp_path, capsys):
    argv = ["--jobs", "0", *_case_argv(behaviour)]
    for spec in _specs("stack", behaviour, request):
        argv += ["--backend", spec]
    status, record = _sweep(argv, tmp_path / "sweep.json")
    return Outcome(_name("stack", behaviour), report=record["report"] or {}, status=status, record=record)


@pytest.fixture(scope="module")
def sweep_worker(tmp_path_factory):
    """One sweep case in one worker process, with every hostile backend of ``SWEEP`` in it (one worker
    start, not one a behaviour), then the witness and torch. An identity case, for the -0.0 write."""
    argv = ["--jobs", "1", "--init", "identity"]
    for kind in [*SWEEP, "witness"]:
        argv += ["--backend", f"hostile:stack_{kind}"]
    return _sweep([*argv, "--backend", "torch"], tmp_path_factory.mktemp("sweep") / "sweep.json")


def run_sweep_worker(behaviour, request, tmp_path, capsys):
    status, record = request.getfixturevalue("sweep_worker")
    return Outcome(_name("stack", behaviour), report=record["report"] or {}, status=status, record=record)


@pytest.fixture(scope="module")
def isolated_run(tmp_path_factory):
    """One ``crosscheck run`` (isolation left to its default) with every hostile backend of
    ``ISOLATED`` in it, each import string in its own worker process, then the witness and torch (in
    process). An identity case, for the -0.0 write."""
    path = tmp_path_factory.mktemp("isolated") / "report.json"
    argv = ["run", *SMALL, "--init", "identity", "--json", str(path)]
    for kind in [*ISOLATED, "witness"]:
        argv += ["--backend", f"hostile:stack_{kind}"]
    status = guarded(main, [*argv, "--backend", "torch"])
    assert path.is_file(), f"no --json report (exit {status})"
    return status, json.loads(path.read_text())


def run_isolated(behaviour, request, tmp_path, capsys):
    status, report = request.getfixturevalue("isolated_run")
    name = _name("stack", behaviour)
    notes = report["backends"][name]["notes"]
    assert notes.get("isolated") == "in its own worker process", notes
    assert "isolated" not in report["backends"]["torch"]["notes"], "a built-in ran in a worker by default"
    return Outcome(name, report=report, status=status)


def run_assert(behaviour, request, tmp_path, capsys):
    backends = _objects("stack", behaviour, request)
    try:
        report = guarded(assert_gradients_close, backends=backends, **CASE, **_case_options(behaviour))
    except AssertionError as exc:
        return Outcome(_name("stack", behaviour), message=str(exc))
    return Outcome(_name("stack", behaviour), report=report.to_dict())


def run_replay(behaviour, request, tmp_path, capsys, *, armed=False):
    """Save a bundle from a run that fails (``stack_wrong`` disagrees) with the hostile backend disarmed,
    then replay it armed: the hostile backend misbehaves in the replay's call. ``armed``: it misbehaves
    in the run too (in a worker for ``os_exit``), so the bundle holds no value of it."""
    bundle = tmp_path / "fail.npz"
    specs = [f"hostile:stack_{behaviour}", "hostile:stack_wrong", "torch"]
    argv = ["run", *SMALL, *_case_argv(behaviour), "--save-bundle", str(bundle), "--quiet"]
    if behaviour != "os_exit":
        argv += ["--no-isolate"]  # disarmed: a worker process would import `hostile` armed
    hostile.ARMED = armed
    status, out = _cli(argv + [a for spec in specs for a in ("--backend", spec)], capsys)
    assert status == 1 and bundle.is_file(), out
    hostile.ARMED = True
    status, out = _cli(["replay", str(bundle), "--trust"], capsys)
    rows, last = {}, None
    for line in out.splitlines():
        cells = [cell.strip() for cell in line.split("│")]
        if len(cells) > 2 and cells[1]:
            last = cells[1]
            rows[last] = line
        elif len(cells) > 2 and last:  # a cell folded onto the next line
            rows[last] += " " + " ".join(cells)
    return Outcome(_name("stack", behaviour), status=status, out=out, rows=rows)


def run_replay_failed(behaviour, request, tmp_path, capsys):
    return run_replay(behaviour, request, tmp_path, capsys, armed=True)


def run_list(behaviour, request, tmp_path, capsys):
    request.getfixturevalue("plugins")
    status, out = _cli(["list", "--json"], capsys)
    found = json.JSONDecoder().raw_decode(out, out.index("{"))[0] if "{" in out else {}
    return Outcome(behaviour.replace("_", "-"), status=status, out=out, report=found)


def run_plugin(behaviour, request, tmp_path, capsys):
    request.getfixturevalue("plugins")
    path = tmp_path / "report.json"
    name = behaviour.replace("_", "-")
    status, out = _cli(["run", *SMALL, "--backend", name, "--backend", "torch", "--json", str(path)], capsys)
    assert path.is_file(), f"no --json report (exit {status}): {out}"
    return Outcome(name, report=json.loads(path.read_text()), status=status, out=out)


RUNNERS = {
    "run-grad": run_python("stack", "grad"),
    "cli-grad": run_cli("stack", "grad"),
    "run-hvp": run_python("hvp", "hvp"),
    "cli-hvp": run_cli("hvp", "hvp"),
    "run-tiny": run_tiny,
    "cli-ste": run_ste,
    "sweep-inprocess": run_sweep_inprocess,
    "sweep-worker": run_sweep_worker,
    "cli-auto": run_isolated,
    "assert": run_assert,
    "replay": run_replay,
    "replay-failed": run_replay_failed,
    "list": run_list,
    "plugin": run_plugin,
}


# -- what must hold -------------------------------------------------------------------------------------


def _state():
    import torch

    jax = sys.modules.get("jax")
    return np.geterr(), torch.get_float32_matmul_precision(), jax and jax.config.jax_default_matmul_precision


@pytest.mark.parametrize(("path", "behaviour"), CELLS, ids=[f"{p}-{b}" for p, b in CELLS])
def test_contract(path, behaviour, request, tmp_path, capsys):
    if behaviour == "jax_precision":
        pytest.importorskip("jax")
    before = _state()
    outcome = RUNNERS[path](behaviour, request, tmp_path, capsys)
    if path.startswith("replay"):
        check_replay(outcome, behaviour, failed=path == "replay-failed")
    elif path == "list":
        check_list(outcome)
    elif outcome.message is not None:  # assert_gradients_close raised
        assert behaviour in FAILS, f"AssertionError for a backend that should pass:\n{outcome.message}"
        assert outcome.name in outcome.message and FAILS[behaviour] in outcome.message, outcome.message
    else:
        check_report(outcome, behaviour, alone=path not in SHARED)
    if behaviour in STATE and path not in SHARED:
        assert _state() == before, "a backend's change of global state was not restored"


def check_report(outcome: Outcome, behaviour: str, *, alone: bool) -> None:
    """The JSON report (and exit status, sweep record) of a run with one hostile backend in it; with
    ``alone`` false the case also held other hostile backends (the worker sweep), so only this
    backend's row and the well-behaved backends are checked."""
    report, name = outcome.report, outcome.name
    shown = f"exit {outcome.status}; {outcome.out}\n{json.dumps(report, indent=1)[:4000]}"
    assert name in report.get("backends", {}), shown
    mine = report["backends"][name]
    others = [n for n, r in report["backends"].items() if r["role"] == "candidate" and n != name]
    others = [n for n in others if alone or n in ("torch", hostile.name("stack", "witness"))]
    assert "torch" in others, shown
    for other in [*others, *([] if behaviour in FAILS else [name])]:
        assert report["backends"][other]["status"] == "ok", shown
        theirs = [c for c in report["comparisons"] if c["backend"] == other]
        assert theirs and all(c["passed"] for c in theirs), shown
    if behaviour in FAILS:
        assert mine["status"] == "failed", shown
        assert "\n" not in mine["error"] and FAILS[behaviour] in mine["error"], shown
        assert report["passed"] is False, shown
    else:
        assert behaviour in NOT_FAILURES
        check_ok(outcome, behaviour, alone=alone)
    if outcome.record is not None:
        expected = "failed" if behaviour in FAILS or not alone else "passed"
        assert outcome.record["status"] == expected, shown
    if outcome.status is not None and alone:
        assert outcome.status == (1 if behaviour in FAILS else 0), shown


def check_ok(outcome: Outcome, behaviour: str, *, alone: bool) -> None:
    report, name = outcome.report, outcome.name
    notes = report["backends"][name]["notes"]
    if alone:
        assert report["passed"] is True, report["problems"]
    if behaviour == "requires_grad":
        assert "detach" in str(notes.get("converted", "")), notes
    if behaviour in STATE:
        changed = notes.get("state_changed")
        assert isinstance(changed, list) and all(isinstance(s, str) for s in changed), notes
        assert any(STATE_NOTE[behaviour] in s.lower() for s in changed), notes
    if behaviour == "markup" and outcome.out:
        assert hostile.MARKUP_NAME in outcome.out, outcome.out


def check_replay(outcome: Outcome, behaviour: str, *, failed: bool = False) -> None:
    rows, shown = outcome.rows, f"exit {outcome.status}\n{outcome.out}"
    for other in ("numpy-fd", hostile.name("stack", "wrong"), "torch"):
        assert "bit for bit" in rows.get(other, ""), shown
    mine = rows.get(outcome.name, "")
    if failed:  # it failed in the run: a row of its own, what it did then and now, and the replay fails
        phrase = FAILS.get(behaviour, "worker process died with exit status 3")
        assert "│ failed originally" in mine, shown
        assert phrase in mine.split("originally:", 1)[1] and "now: failed" in mine, shown
        assert "NOT REPRODUCED: 1 of 4 backends failed originally" in outcome.out, shown
        assert outcome.status == 1, shown
    elif behaviour in FAILS:
        assert "failed" in mine and FAILS[behaviour] in mine, shown
        assert outcome.status == 1, shown
    else:
        assert "bit for bit" in mine, shown
        assert outcome.status == 0, shown


def check_list(outcome: Outcome) -> None:
    shown = f"exit {outcome.status}\n{outcome.out}"
    assert outcome.status == 0, shown
    rows = {row["name"]: row for row in outcome.report.get("backends", [])}
    mine = rows.get(outcome.name)
    assert mine is not None and mine["available"] is False, shown
    assert "\n" not in mine["error"] and "SystemExit" in mine["error"], shown
    for other in ("numpy-fd", "torch", BROKEN, "exit-factory", "exit-info", "none-factory", "none-grad"):
        assert other in rows, shown
    assert rows["torch"]["available"] is True, shown


# -- a real Ctrl-C --------------------------------------------------------------------------------------


def test_a_real_ctrl_c_stops_the_run_and_reports_what_finished(tmp_path):
    """SIGINT while a backend sleeps: the process ends soon, exit 130, ``interrupted`` and the backends
    that finished before it (the reference and torch) are printed."""
    marker = tmp_path / "started"
    command = [sys.executable, "-m", "crosscheck", "run", *SMALL, "--backend", "torch"]
    command += ["--backend", "hostile:stack_slow", "--json", str(tmp_path / "report.json")]
    process = processes.start(command, tmp_path, marker)
    try:
        processes.wait_until_started(marker, process)
        process.send_signal(signal.SIGINT)
        out, _ = process.communicate(timeout=10)
    finally:
        process.kill()
        process.wait()
    assert process.returncode == 130, out
    assert "interrupted" in out, out
    assert "numpy-fd" in out and "torch" in out, out


def test_the_ctrl_c_policy_is_a_parameter_of_the_guarded_call():
    """A KeyboardInterrupt a backend raises is its failure unless the run's policy was pressed (the
    user pressed Ctrl-C); an ``Interrupted`` (a handler's) is the user's under any policy, none too."""
    from crosscheck._engine.call import guarded
    from crosscheck._errors import Interrupted, Interrupts

    def raises(exc):
        raise exc

    interrupts = Interrupts()
    for policy in (None, interrupts):
        out = guarded(raises, (KeyboardInterrupt(),), inputs={}, interrupts=policy)
        assert not out.ok and "not a Ctrl-C from the user" in out.error
        with pytest.raises(Interrupted):
            guarded(raises, (Interrupted(),), inputs={}, interrupts=policy)
    interrupts.press()
    with pytest.raises(Interrupted):
        guarded(raises, (KeyboardInterrupt(),), inputs={}, interrupts=interrupts)
    out = guarded(raises, (KeyboardInterrupt(),), inputs={}, interrupts=Interrupts())  # another run's
    assert not out.ok


@pytest.mark.parametrize(
    "change",
    [
        lambda a: a.__setitem__((0, 0), -0.0),  # a signed zero: equal as a value, not as bits
        lambda a: a.__setitem__((1, 2), np.nan),
        lambda a: a.__setitem__((2, 1), np.nextafter(a[2, 1].real, np.inf)),
    ],
    ids=["signed zero", "nan", "one ulp"],
)
@pytest.mark.parametrize("dtype", ["float32", "float64", "complex128", "int8"])
def test_a_write_is_found_in_the_bits_of_any_array(change, dtype):
    from crosscheck._backends.handed import same_bits as _same_bits

    before = np.arange(12, dtype="float64").reshape(3, 4).astype(dtype)
    live = before.copy()
    assert _same_bits(live, before) and _same_bits(live[:, ::2], before[:, ::2])
    if dtype == "int8":
        live[1, 2] += 1
    else:
        change(live)
    assert not _same_bits(live, before)
    other = {"complex128": "i8", "int8": "u1"}.get(dtype, f"i{before.itemsize}")
    assert not _same_bits(before.view(other), before)  # the same bits as another dtype: not the same
    nan = np.full(3, np.nan)
    assert _same_bits(nan, nan.copy())  # the same NaN bits are unchanged
