"""Every user callable runs guarded: one table, ``CELLS``, of (callable, behaviour) -> outcome.

A callable that runs before any backend exists (a workload's ``generate`` and NumPy ``reference``, a
workload factory, a port's ``inputs`` and ``jax_inputs``, its PyTorch module's ``state_dict()``, its
Flax module's ``setup`` and the ``jax_call`` that Flax's ``init`` runs) and exits, raises, raises
``KeyboardInterrupt`` or writes to the arrays it receives is a bad workload: one line that names it,
exit 2 on the command line, a ``ValueError`` from ``crosscheck.run``. One that runs inside a backend (a
workload's implementation, a port's ``torch_call`` and ``loss``, a backend's factory) is that
backend's failure record, exit 1, and the other backends still run. Never exit 0, never a traceback,
never a ``SystemExit`` or ``KeyboardInterrupt`` out of crosscheck. The misbehaving callables are in
``tests/support/usercode.py``.
"""

from __future__ import annotations

import importlib.util
import os
import signal

import pytest

import crosscheck
from crosscheck._cli.main import main
from crosscheck._errors import Interrupted, UserCodeFailed, user_call

EXITS = "SystemExit: 0 (sys.exit was called inside"
KBINT = "KeyboardInterrupt (raised inside"
READ_ONLY = "ValueError: assignment destination is read-only"
INIT = "port `p`: the Flax module's `init` (its `setup` and `__call__`) failed: "

#: (callable, behaviour, exit status, what the one line or the backend's error says)
CELLS = [
    ("generate", "exit", 2, f"workload `w`: `generate(rng, dtype)` failed: {EXITS} `generate(rng, dtype)`)"),
    ("generate", "raises", 2, "workload `w`: `generate(rng, dtype)` failed: RuntimeError: boom"),
    ("generate", "kbint", 2, f"`generate(rng, dtype)` failed: {KBINT} `generate(rng, dtype)`, not a Ctrl-C"),
    ("reference", "exit", 2, f"the `reference` loss raised at the case's point: {EXITS} the `reference`"),
    ("reference", "writes", 2, f"the `reference` loss raised at the case's point: {READ_ONLY}"),
    ("factory", "exit", 2, f"workload `usercode:factory_exit`: its factory failed: {EXITS} its factory)"),
    ("inputs", "exit", 2, f"port `p`: `inputs(rng, dtype)` failed: {EXITS} `inputs(rng, dtype)`)"),
    ("inputs", "kbint", 2, f"port `p`: `inputs(rng, dtype)` failed: {KBINT}"),
    ("jax_inputs", "exit", 2, f"port `p`: `jax_inputs(inputs)` failed: {EXITS}"),
    ("jax_inputs", "writes", 2, f"port `p`: `jax_inputs(inputs)` failed: {READ_ONLY}"),
    ("state_dict", "exit", 2, f"port `p`: the PyTorch module's `state_dict()` failed: {EXITS}"),
    ("state_dict", "raises", 2, "port `p`: the PyTorch module's `state_dict()` failed: RuntimeError: boom"),
    ("setup", "exit", 2, INIT + EXITS),
    ("setup", "kbint", 2, INIT + KBINT),
    ("jax_call", "exit", 2, INIT + EXITS),
    ("implementation", "exit", 1, f"{EXITS} the backend)"),
    ("implementation", "kbint", 1, f"{KBINT} the backend, not a Ctrl-C"),
    ("torch_call", "exit", 1, f"{EXITS} the backend)"),
    ("loss", "raises", 1, "RuntimeError: boom"),
    ("backend", "exit", 1, f"`usercode:backend_exit`: calling the factory failed: {EXITS} the factory)"),
    ("backend", "raises", 1, "`usercode:backend_raises`: calling the factory failed: RuntimeError: boom"),
    ("backend", "kbint", 1, f"calling the factory failed: {KBINT} the factory, not a Ctrl-C"),
]  # fmt: skip
PORTS = ("inputs", "jax_inputs", "state_dict", "setup", "jax_call", "torch_call", "loss")
IDS = [f"{c}-{b}" for c, b, *_ in CELLS]
#: The stack's smallest case, for a backend's factory (the hostile backend beside torch).
SMALL = {"layers": 2, "batch": 2, "dim": 3}


def _skip_without_frameworks(callable_: str) -> None:
    for name in ("torch", *(("flax",) if callable_ in PORTS else ())):
        if importlib.util.find_spec(name) is None:
            pytest.skip(f"needs {name}")


def _argv(callable_: str, behaviour: str) -> list[str]:
    spec = f"usercode:{callable_}_{behaviour}"
    if callable_ == "backend":
        small = [f"--{k}={v}" for k, v in SMALL.items()]
        return ["run", *small, "--backend", spec, "--backend", "torch", "--no-isolate"]
    # A port's reference is PyTorch's gradient: a failing PyTorch side fails the run at once.
    reference = ["--reference", "torch"] if callable_ in PORTS else []
    return ["run", "--workload", spec, *reference, "--no-isolate"]


@pytest.mark.parametrize(("callable_", "behaviour", "status", "says"), CELLS, ids=IDS)
def test_the_command_line(callable_, behaviour, status, says, capsys):
    _skip_without_frameworks(callable_)
    capsys.readouterr()
    try:
        found = main(_argv(callable_, behaviour))
    except (SystemExit, KeyboardInterrupt) as exc:
        pytest.fail(f"{type(exc).__name__}({exc}) escaped from crosscheck", pytrace=False)
    out, err = capsys.readouterr()
    assert found == status, out + err
    assert "Traceback" not in out + err
    if status == 2:
        assert err.count("\n") == 1 and err.startswith("crosscheck: error: "), err
        assert says in err
    else:
        assert says in " ".join(out.split()), out
        if callable_ == "backend":  # the others still run
            assert "│ torch " in out and "ok │" in out.split("│ torch ")[1].splitlines()[0]


@pytest.mark.parametrize(("callable_", "behaviour", "status", "says"), CELLS, ids=IDS)
def test_crosscheck_run(callable_, behaviour, status, says):
    _skip_without_frameworks(callable_)
    spec = f"usercode:{callable_}_{behaviour}"
    if callable_ == "backend":
        given = {**SMALL, "backends": [spec, "torch"]}
    else:
        given = {"workload": spec, **({"reference": "torch"} if callable_ in PORTS else {})}
    try:
        if status == 2:
            with pytest.raises(ValueError, match=r"^(workload|port) `") as raised:
                crosscheck.run(**given, isolate=False)
            assert says in str(raised.value) and "\n" not in str(raised.value)
            return
        report = crosscheck.run(**given, isolate=False)
    except (SystemExit, KeyboardInterrupt) as exc:
        pytest.fail(f"{type(exc).__name__}({exc}) escaped from crosscheck", pytrace=False)
    failed = {name: r.error for name, r in report.backends.items() if r.status == "failed"}
    assert not report.passed and any(says in error for error in failed.values()), failed
    if callable_ == "backend":
        assert report.backends["torch"].status == "ok"


def test_a_backend_factory_that_exits_in_its_worker_process_is_its_failure(capsys):
    argv = _argv("backend", "exit")[:-1]  # the default: an import string runs in a worker process
    assert main(argv) == 1
    out = " ".join(capsys.readouterr().out.split())
    assert f"`usercode:backend_exit`: calling the factory failed: {EXITS} the factory)" in out


def test_a_backend_module_that_exits_on_import_is_its_failure(tmp_path, monkeypatch, capsys):
    (tmp_path / "exits_on_import.py").write_text("import sys\nsys.exit(0)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    argv = _argv("backend", "exit")
    argv[argv.index("usercode:backend_exit")] = "exits_on_import:grad"
    assert main(argv) == 1  # was exit 2 for the whole run: now that backend's record, as for a plugin
    out = " ".join(capsys.readouterr().out.split())
    assert f"importing `exits_on_import` failed: {EXITS} `exits_on_import`)" in out
    assert "│ torch " in out


def test_a_sys_exit_that_reaches_the_command_is_exit_2_not_its_status(monkeypatch, capsys):
    import crosscheck._cli.run as cli_run

    def exits(args):
        raise SystemExit(0)

    monkeypatch.setattr(cli_run, "run", exits)
    assert main(["run"]) == 2
    err = capsys.readouterr().err
    assert err == (
        "crosscheck: error: SystemExit: 0 (sys.exit was called inside code crosscheck ran); the command "
        "stopped, nothing passed\n"
    )


def test_the_users_ctrl_c_inside_user_code_is_not_the_codes_failure():
    def presses_ctrl_c():
        os.kill(os.getpid(), signal.SIGINT)  # delivered to this (the main) thread before the next line
        raise AssertionError("the Ctrl-C did not arrive")

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # Python's, as in a script
    try:
        with pytest.raises(Interrupted):
            user_call("workload `w`", "`generate(rng, dtype)`", presses_ctrl_c)
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # put back
        with pytest.raises(UserCodeFailed, match=r"^workload `w`: `g` failed: KeyboardInterrupt \(raised"):
            user_call("workload `w`", "`g`", _raise_keyboard_interrupt)
    finally:
        signal.signal(signal.SIGINT, previous)


def _raise_keyboard_interrupt():
    raise KeyboardInterrupt


@pytest.mark.parametrize("make", ["workload", "port"])
def test_the_same_workload_and_port_behaving_pass(make):
    import usercode

    _skip_without_frameworks("inputs" if make == "port" else "generate")
    workload = getattr(usercode, make)("none", "none")
    report = crosscheck.run(workload=workload, **({"reference": "torch"} if make == "port" else {}))
    assert report.passed, report.problems


def test_a_backend_named_like_an_emoji_code_prints_as_written(capsys):
    from crosscheck._cli.terminal import make_console
    from crosscheck._report.text import plain

    make_console().print(plain("mod:factory: failed: RuntimeError: :fire:"), markup=False)
    assert capsys.readouterr().out == "mod:factory: failed: RuntimeError: :fire:\n"
