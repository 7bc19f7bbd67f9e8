"""Compiled JAX programs kept from check to check (``programs.Kept``): each check traces afresh, and a
program compiled in an earlier check runs again only where the new trace is the same program (its
StableHLO text, its arguments' and results' structures, its devices), never where it calls back into
Python code other than crosscheck's own recorders."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from paths import ROOT

jax = pytest.importorskip("jax")

import jax.numpy as jnp  # noqa: E402

from crosscheck._workloads import programs  # noqa: E402
from crosscheck._workloads.programs import Kept, calls_back  # noqa: E402

#: Read by ``_scaled`` while JAX traces it (a module-level flag).
FACTOR = 2.0
X = np.arange(3.0, dtype=np.float32)


def _scaled(x):
    return x * FACTOR


def test_a_renewed_function_is_traced_afresh_and_an_unchanged_program_is_not_compiled_again(monkeypatch):
    kept = Kept()
    assert np.asarray(kept(_scaled, X)).tolist() == [0.0, 2.0, 4.0]
    kept.renew()
    assert np.asarray(kept(_scaled, X)).tolist() == [0.0, 2.0, 4.0]
    assert kept.compiled == 1  # the same program: the first check's compiled program runs again
    monkeypatch.setattr(sys.modules[__name__], "FACTOR", 3.0)
    assert np.asarray(kept(_scaled, X)).tolist() == [0.0, 2.0, 4.0]  # within a check: its trace
    kept.renew()
    assert np.asarray(kept(_scaled, X)).tolist() == [0.0, 3.0, 6.0]  # the next check: as it is now
    assert kept.compiled == 2
    monkeypatch.setattr(sys.modules[__name__], "FACTOR", 2.0)
    kept.renew()
    assert np.asarray(kept(_scaled, X)).tolist() == [0.0, 2.0, 4.0]
    assert kept.compiled == 2  # the first program, kept: found again


def test_the_same_program_with_other_argument_names_is_compiled_again():
    kept = Kept()

    def named(params):
        return {k: v * 2 for k, v in params.items()}

    assert list(kept(named, {"a": X})) == ["a"]
    kept.renew()
    assert list(kept(named, {"b": X})) == ["b"]  # the same text: another structure
    assert kept.compiled == 2


def _debug_printed(x):
    jax.debug.callback(lambda v: None, x)
    return x + 1


def _pure_called(x):
    return jax.pure_callback(np.sin, jax.ShapeDtypeStruct(x.shape, x.dtype), x)


def _custom_derivatives(x):
    return jax.nn.relu(x) + jax.nn.gelu(x) + jax.nn.logsumexp(x) + jax.nn.softmax(x)


def _recorded(x):
    jax.debug.callback(lambda *a: None, programs.MARK, np.frombuffer(b"fc1", np.uint8).copy(), x)
    return x * 2


@pytest.mark.parametrize(
    ("fn", "expected"),
    [
        (_debug_printed, True),
        (_pure_called, True),
        (lambda x: jax.lax.scan(lambda c, u: (c + _pure_called(u), None), 0.0, x)[0], True),  # inner
        (_custom_derivatives, False),  # their rules are traced, not called, by the program
        (jax.grad(lambda x: jnp.sum(_custom_derivatives(x))), False),
        (_recorded, False),  # crosscheck's own recorder: what it says is in the program's text
    ],
    ids=["debug-callback", "pure-callback", "in-a-scan", "custom-derivatives", "their-gradient", "marked"],
)
def test_a_program_that_calls_python_code_is_told(fn, expected):
    assert calls_back(jax.make_jaxpr(fn)(X)) is expected


def test_a_program_that_calls_back_is_compiled_afresh_in_each_check_and_calls_the_new_function():
    said: list[str] = []
    kept = Kept()
    for word in ("first", "second"):

        def told(x, word=word):
            jax.debug.callback(lambda v: said.append(word), x)
            return x + 1

        kept.renew()
        kept(told, X)
        kept(told, X)  # within a check: compiled once
        jax.effects_barrier()
    assert said == ["first", "first", "second", "second"]
    assert kept.compiled == 2


def test_a_program_is_kept_for_the_devices_it_was_compiled_for():
    """Arrays committed to another device: no part of their trace, another compiled program."""
    code = """
    import json, os
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
    import jax, numpy as np
    from crosscheck._workloads.programs import Kept
    kept = Kept()
    found = []
    for device in jax.devices()[:2] * 2:
        kept.renew()
        out = kept(lambda x: x * 2, jax.device_put(np.ones(3, np.float32), device))
        found.append(next(iter(out.devices())).id)
    print(json.dumps([found, kept.compiled]))
    """
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={"PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu", "PATH": ""},
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.strip().splitlines()[-1]) == [[0, 1, 0, 1], 2]


def test_the_programs_kept_are_the_newest_few():
    kept = Kept(keep=2)
    for scale in (1.0, 2.0, 3.0, 1.0):
        kept.renew()
        kept(lambda x, scale=scale: x * scale, X)
    assert kept.compiled == 4  # the first was let go when the third came
