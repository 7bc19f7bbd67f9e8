"""A port's module captures are taken before the reference's gradients (issue 38): the four guarded
forward passes run while only the models and the case are held, not after every gradient, rounding and
per-entry comparison (where they made the run's peak memory). They are taken once, and only when the
run's candidates name the port (``jax``); the forward check (``quantity="output"``) captures as before."""

from __future__ import annotations

import sys

import pytest
from paths import ROOT

pytest.importorskip("jax")
pytest.importorskip("torch")
pytest.importorskip("flax")

sys.path.insert(0, str(ROOT))  # the examples/ package of the repository

import crosscheck
from crosscheck._workloads.model.judge import GenericJudge
from crosscheck._workloads.port.judge.gradient import PortJudge


def _logged(monkeypatch) -> list[str]:
    """The order of the module captures (``torch`` / ``jax``) and of the gradient calls (``gradient``)."""
    events: list[str] = []
    runs, evaluate = PortJudge._runs, GenericJudge.evaluate

    def logged_runs(self, call, *, torch, main=None):
        events.append("torch" if torch else "jax")
        return runs(self, call, torch=torch, main=main)

    def logged_evaluate(self, backend, call):
        events.append("gradient")
        return evaluate(self, backend, call)

    monkeypatch.setattr(PortJudge, "_runs", logged_runs)
    monkeypatch.setattr(GenericJudge, "evaluate", logged_evaluate)
    return events


def _check(**kwargs):
    from examples.port import transformer_linen

    port = transformer_linen.make_port()
    return crosscheck.check(port, execution=crosscheck.Execution(isolate=False), **kwargs)


def test_the_captures_are_taken_once_before_the_references_gradient(monkeypatch):
    events = _logged(monkeypatch)
    report = _check(reference="torch")
    assert report.passed, report.problems
    assert events[:3] == ["torch", "jax", "gradient"]  # before the reference's gradient
    assert events.count("torch") == events.count("jax") == 1  # used by the port's comparison
    assert any(c.module is not None for c in report.comparisons)  # its module comparisons were made


def test_without_the_port_among_the_candidates_nothing_is_captured(monkeypatch):
    events = _logged(monkeypatch)
    report = _check(reference="numpy-fd", backends=["torch"])
    assert report.passed, report.problems
    assert "torch" not in events and "jax" not in events and "gradient" in events


def test_the_forward_check_captures_each_side_once(monkeypatch):
    events = _logged(monkeypatch)
    report = _check(reference="torch", quantity="output")
    assert report.passed, report.problems
    assert events.count("torch") == events.count("jax") == 1 and "gradient" not in events


def test_a_write_in_an_early_capture_is_owed_to_the_candidate_that_uses_it():
    from crosscheck._workloads.port.judge.capture import Early

    class Call:
        phase, wrote = "the reference", []

    def runs(call, *, torch):
        call.wrote.append((None, call.phase, f"{'torch' if torch else 'jax'} wrote"))
        return "records"

    call, early = Call(), Early()
    early.take(runs, call, wanted=False)
    assert early.use(call) is None and call.wrote == []  # not wanted: nothing taken
    early.take(runs, call, wanted=True)
    assert call.wrote == []  # the reference is not failed for it
    call.phase = "jax"
    assert early.use(call) == ("records", "records")
    assert call.wrote == [(None, "jax", "torch wrote"), (None, "jax", "jax wrote")]
    assert early.use(call) is None  # once: a second port candidate captures its own


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_mappings_leaves_are_made_inside_the_compiled_capture(monkeypatch, dtype):
    """The JAX capture makes the port's leaves from the PyTorch tensors inside its one compiled forward
    pass (issue 38: made one operation at a time, GPT-2 small's 96 transposed layer weights took 3.3 s
    of a check, a model's size of new memory): the mapping sees traced arrays, and the records are those
    of the leaves made beforehand, bit for bit (a transpose or reshape only moves the numbers)."""
    import jax
    import numpy as np

    from crosscheck._workloads.port.declare import build
    from crosscheck._workloads.port.judge import capture
    from crosscheck._workloads.port.sides import jax_side

    traced: list[bool] = []
    taken: list[tuple] = []
    leaves, jax_capture = capture.jax_leaves, capture.jax_capture

    def seen(prepared, source):
        traced.append(all(isinstance(v, jax.core.Tracer) for v in source[0].values()))
        return leaves(prepared, *source)

    def kept(prepared, params, inputs):
        records = jax_capture(prepared, params, inputs)
        taken.append((prepared, dict(params), dict(inputs), records))
        return records

    monkeypatch.setattr(build.Prepared, "made", seen)  # what the capture makes the leaves with
    monkeypatch.setattr(capture, "jax_capture", kept)
    report = _check(reference="torch", dtype=dtype)
    assert report.passed, report.problems
    assert taken and traced and all(traced)
    prepared, params, inputs, records = taken[0]
    with jax.enable_x64(dtype == "float64"):
        i = jax_side.to_jax(inputs)
        made = leaves(prepared, {k: jax.numpy.asarray(v) for k, v in params.items()}, i)
        dtype_of = jax.dtypes.canonicalize_dtype(np.dtype(dtype))
        before = prepared.jax_side.capture(
            made, build.jax_side_inputs(prepared.port, prepared.user_inputs(i)), dtype_of
        )
    assert [(r.name, r.module_type) for r in records] == [(r.name, r.module_type) for r in before]
    for got, want in zip(records, before, strict=True):
        for u, v in zip(got.inputs + got.outputs, want.inputs + want.outputs, strict=True):
            assert np.array_equal(u, v), got.name
