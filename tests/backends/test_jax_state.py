"""XLA's deterministic GPU ops as a setting of the JAX side (``jax_deterministic``): XLA reads its flags
once, when JAX first uses a device, so the setting is an environment a process starts with
(``state.environ``): set here only where JAX is not imported yet, a contained check's worker started
with it, and refused in one line where JAX was imported already without it. No GPU is needed: the flag
is read by every XLA backend, and the JAX side says it was on (the report's ``where`` line)."""

from __future__ import annotations

import os

import pytest

import crosscheck
from crosscheck._backends import placements
from crosscheck._engine.plan import prepare, start_environment
from crosscheck._engine.process.isolate import spawn
from crosscheck._report.table import where_line

jax_state = pytest.importorskip("crosscheck.backends.jax.state")

FLAG = "--xla_gpu_deterministic_ops=true"
ON = placements({"jax_deterministic": "on"})
#: A worker that sends back the XLA flags it started with.
ECHO = (
    "import os, sys; from multiprocessing.connection import Connection; "
    "Connection(int(sys.argv[1])).send(os.environ.get('XLA_FLAGS'))"
)


def test_the_setting_is_xlas_flag_added_to_the_flags_given(monkeypatch):
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    assert jax_state.environ(ON) == {"XLA_FLAGS": FLAG}
    assert jax_state.environ(placements()) == {} and start_environment(placements()) == {}
    monkeypatch.setenv("XLA_FLAGS", "--xla_dump_to=/tmp/x")
    assert start_environment(ON) == {"XLA_FLAGS": f"--xla_dump_to=/tmp/x {FLAG}"}
    monkeypatch.setenv("XLA_FLAGS", FLAG)
    assert jax_state.environ(ON) == {}  # given already


def test_the_environment_a_worker_starts_with_has_it(monkeypatch):
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    conn, process, failed = spawn(ECHO, env=start_environment(ON))
    assert not failed and process is not None
    try:
        assert conn.poll(60) and conn.recv() == FLAG
    finally:
        process.wait(60)
        conn.close()
    assert "XLA_FLAGS" not in os.environ  # this process's own left as it was


def test_jax_imported_already_without_it_is_refused_in_one_line(monkeypatch):
    pytest.importorskip("jax")
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    with pytest.raises(
        ValueError, match=r"^`jax_deterministic` on: JAX is imported in this process"
    ) as refused:
        prepare(ON)
    assert "\n" not in str(refused.value) and FLAG in str(refused.value)
    assert "XLA_FLAGS" not in os.environ
    monkeypatch.setenv("XLA_FLAGS", FLAG)  # given before starting: said, nothing to set
    assert prepare(ON) == [f"XLA's deterministic GPU ops on (XLA_FLAGS {FLAG})"]


def test_a_contained_check_runs_its_jax_side_with_it_and_says_so(monkeypatch):
    pytest.importorskip("jax")
    from paths import SUPPORT

    monkeypatch.delenv("XLA_FLAGS", raising=False)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(SUPPORT), os.environ.get("PYTHONPATH", "")]))
    execution = crosscheck.Execution(jax_deterministic="on", isolate=True)
    report = crosscheck.check("deterministic_probe:workload", backends=["jax"], execution=execution)
    assert report.passed, report.problems
    assert report.backends["jax"].info["deterministic_ops"] == "on"
    assert "deterministic ops on" in where_line(report.backends)
    assert report.to_dict()["jax_settings"]["jax_deterministic"] == "on"
    assert "XLA_FLAGS" not in os.environ
