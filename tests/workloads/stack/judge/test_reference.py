"""The gradient judge's reference phase (``judge/reference.py``): which oracle mode runs, and what the
phase hands to every candidate's comparison in the engine's ``Reference`` (``Referenced``): the
reference backend, the passes to judge on (along the screen's directions, with the oracle's float64
model) and the answer at every entry or the screen; never an attribute of the judge filled in."""

from __future__ import annotations

from typing import Any

import hostile
import numpy as np
import planted
import pytest

import crosscheck
from crosscheck._engine.call import Outcome
from crosscheck._records import Oracle
from crosscheck._report.table import summary
from crosscheck._workloads.protocol import Options
from crosscheck._workloads.stack.judge import cost
from crosscheck._workloads.stack.judge.passes import Passes
from crosscheck._workloads.stack.judge.reference import Referenced, mode, reference
from crosscheck._workloads.stack.workload import Stack

POINT = Stack(layers=3, batch=4, dim=6).point(dtype="float32", seed=1)


class _Call:
    """The guarded call, unguarded: each call's value, or its exception as the error."""

    def __call__(self, fn, *args, convert=None, **kwargs) -> Outcome:
        try:
            return Outcome(fn(*args, **kwargs), None, 0.0)
        except Exception as exc:
            return Outcome(None, f"{type(exc).__name__}: {exc}", 0.0)

    def failure(self, error: str) -> Outcome:
        return Outcome(None, error, 0.0)


class _Grad:
    """Another backend as the reference: the exact float64 gradient, returned in ``dtype``."""

    name = "grad-only"

    def __init__(self, dtype: Any = np.float32, shape: tuple[int, ...] | None = None) -> None:
        self.dtype, self.shape = dtype, shape

    def grad(self, weights, x):
        found = hostile.stack_grad(weights, x).astype(self.dtype)
        return found if self.shape is None else found.reshape(self.shape)


def _passes() -> Passes:
    return Passes.of(POINT.params["weights"], POINT.inputs["x"])


def _referenced(backend: Any, oracle_mode: str) -> tuple[Passes, Referenced]:
    passes = _passes()
    out = reference(passes, Options(oracle=Oracle(oracle_mode)), "float32", backend, _Call())
    assert out.error is None, out.error
    assert isinstance(out.value.data, Referenced) and out.value.data.backend is backend
    return passes, out.value.data


def test_auto_takes_full_then_outputs_then_the_screen_by_cost_and_memory(monkeypatch):
    oracle, passes = crosscheck.load_backend("numpy-fd"), _passes()
    auto = Options(oracle=Oracle("auto"))
    assert mode(auto, passes, oracle) == "full"
    monkeypatch.setattr(cost, "SCREEN_FLOPS", 1.0)
    assert mode(auto, passes, oracle) == "outputs"
    assert mode(auto, passes, oracle, fits=False) == "screen"  # its memory estimate does not fit
    assert mode(auto, passes, _Grad()) == "full"  # it can neither screen nor difference outputs
    monkeypatch.setattr(cost, "OUTPUTS_FLOPS", 1.0)
    assert mode(auto, passes, oracle) == "screen"
    assert mode(Options(oracle=Oracle("full")), passes, oracle) == "full"
    assert mode(Options(oracle=Oracle("outputs")), passes, oracle) == "outputs"
    with pytest.raises(ValueError, match="`oracle_mode` 'screen' needs a reference that can screen"):
        mode(Options(oracle=Oracle("screen")), passes, _Grad())
    with pytest.raises(ValueError, match="`oracle_mode` 'outputs' needs a reference that differences"):
        mode(Options(oracle=Oracle("outputs")), passes, _Grad())


@pytest.mark.parametrize(("layers", "dim"), [(8, 128), (8, 256), (8, 1024), (8, 2048), (4, 512)])
def test_auto_differences_the_layers_outputs_where_the_full_oracle_is_costly_up_to_its_budget(layers, dim):
    assert cost.full_oracle_flops(layers, 8, dim) > cost.SCREEN_FLOPS
    assert cost.gradient_mode(layers, 8, dim, screens=True, outputs=True, fits=True) == "outputs"
    assert cost.gradient_mode(layers, 8, dim, screens=True, outputs=True, fits=False) == "screen"


def test_auto_screens_past_the_outputs_oracles_budget_and_judges_every_entry_below_the_screens():
    assert cost.gradient_mode(8, 8, 4096, screens=True, outputs=True, fits=True) == "screen"
    assert cost.gradient_mode(8, 8, 64, screens=True, outputs=True, fits=True) == "full"
    assert cost.outputs_flops(8, 8, 2048) <= cost.OUTPUTS_FLOPS < cost.outputs_flops(8, 8, 4096)


def test_the_full_oracle_hands_on_its_answer_and_its_float64_model():
    passes, referenced = _referenced(crosscheck.load_backend("numpy-fd"), "full")
    assert referenced.screening is None and referenced.answer is not None
    assert referenced.answer.kink is not None and referenced.answer.value.shape == passes.weights.shape
    assert referenced.passes is passes and referenced.passes.directions is None
    assert referenced.passes.models["float64"].direction_sigma is None  # the oracle's, kept


def test_the_outputs_oracle_hands_on_every_entry_and_its_float64_model_and_says_its_mode():
    passes = _passes()
    options = Options(oracle=Oracle("outputs"))
    out = reference(passes, options, "float32", crosscheck.load_backend("numpy-fd"), _Call())
    referenced = out.value.data
    assert out.value.notes["mode"] == "outputs" and referenced.mode == "outputs"
    assert referenced.screening is None and referenced.answer is not None
    assert referenced.answer.kink_at is not None and referenced.answer.value.shape == passes.weights.shape
    assert referenced.passes is passes and passes.models["float64"].direction_sigma is None


def test_a_screen_hands_on_the_passes_along_its_directions_and_leaves_the_judges_as_they_were():
    passes, referenced = _referenced(crosscheck.load_backend("numpy-fd"), "screen")
    screening = referenced.screening
    assert referenced.answer is None and screening is not None
    assert referenced.passes is not passes and passes.directions is None
    assert referenced.passes.directions is screening.directions
    assert referenced.passes.models["float64"].direction_sigma is not None  # the oracle's, kept


def test_another_backend_is_judged_by_its_own_modelled_rounding():
    passes, referenced = _referenced(_Grad(), "auto")
    answer = referenced.answer
    assert answer is not None and referenced.screening is None and answer.kink is None
    np.testing.assert_array_equal(answer.error, passes.model("float32").grad_bound)
    _, in_float64 = _referenced(_Grad(np.float64), "auto")
    assert in_float64.answer is not None
    np.testing.assert_array_equal(in_float64.answer.error, passes.model("float64").grad_bound)


def test_a_reference_of_the_wrong_shape_is_no_reference():
    wrong = _Grad(shape=(3, 36))
    out = reference(_passes(), Options(), "float32", wrong, _Call())
    assert out.value is None
    assert out.error == "reference gradient must be finite with shape (3, 6, 6); found shape (3, 36)"


def test_an_entry_the_screen_cannot_see_fails_where_auto_now_judges_every_entry():
    # The 9th largest entry of a layer off by 2e-4 (30 x its tolerance): below its layer's directions at
    # d = 256 and not among the 8 largest that the spot check takes, so the screen passes it (and says
    # that it screened); "auto" judges every entry there, from the layers' outputs, and fails it.
    wrong = planted.off_at_ninth_largest(2e-4)
    report = crosscheck.run(dim=256, batch=8, seed=0, backends=[wrong])
    (comparison,) = report.comparisons
    assert report.backends["numpy-fd"].notes["mode"] == "outputs"
    assert not report.passed and comparison.coverage == "every entry"
    assert comparison.mismatched == 1 and comparison.worst_ratio is not None and comparison.worst_ratio > 10
    screened = crosscheck.run(dim=256, batch=8, seed=0, backends=[wrong], oracle_mode="screen")
    assert screened.passed
    assert "(screened: 64 of 524288 entries judged one by one, the others only along 4 random " in (
        summary(screened)
    )
