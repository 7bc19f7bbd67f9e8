"""The passes a candidate's gradient is judged on (``judge/passes.py``): each view is a frozen record of
its own that shares the memos of the passes it came from and never sets a field of them; a candidate's
device scales its own model, never the reference's; the oracle's float64 model is kept only where it
fits."""

from __future__ import annotations

import dataclasses

import numpy as np
import planted
import pytest

from crosscheck._workloads.stack import pattern as _pattern
from crosscheck._workloads.stack import rounding
from crosscheck._workloads.stack.judge.answers import GradAnswer
from crosscheck._workloads.stack.judge.directions import SIGNS, sign_directions
from crosscheck._workloads.stack.judge.passes import Passes
from crosscheck._workloads.stack.workload import Stack

#: A float32 case whose candidate (``planted.activations``) flips a ReLU within rounding.
POINT = Stack(layers=8, batch=4, dim=6, init="nearzero").point(dtype="float32", seed=0)


def _passes() -> Passes:
    return Passes.of(POINT.params["weights"], POINT.inputs["x"])


def _flipped(passes: Passes) -> _pattern.Pattern:
    masks = list(planted.activations(passes.weights, passes.x) > 0)
    pattern = _pattern.held(passes.fwd, passes.deltas, masks)
    assert len(pattern.flipped), "the case must flip a ReLU in float32"
    return pattern


def test_a_view_is_a_record_of_its_own_sharing_the_memos():
    passes = _passes()
    with pytest.raises(dataclasses.FrozenInstanceError):
        passes.scale = 4.0
    directions = sign_directions(8, 2, 6, SIGNS)
    for view in (passes.scaled(4.0), passes.along(directions)):
        assert view is not passes and (passes.scale, passes.directions) == (1.0, None)
        assert view.models is passes.models and view.underflows is passes.underflows
        assert view.kinks is passes.kinks
    assert passes.along(directions).directions is directions


def test_a_candidates_device_scales_its_own_model_made_once_never_float64s():
    passes = _passes()
    scaled = passes.scaled(4.0)
    own, reference = scaled.model("float32"), scaled.model("float64")
    np.testing.assert_array_equal(own.grad_sigma, 4.0 * passes.model("float32").grad_sigma)
    assert reference is passes.model("float64")
    assert set(passes.models) == {"float32", "float64"}  # each made once, for every view
    assert passes.model("float32") is passes.models["float32"]  # unscaled where the scale is 1


def test_along_the_screens_directions_a_model_models_them_too():
    directions = sign_directions(8, 3, 6, SIGNS)
    model = _passes().along(directions).model("float32")
    assert model.direction_sigma is not None and model.direction_sigma.shape == (8, 3)
    assert _passes().model("float32").direction_sigma is None


def test_held_at_a_flipped_pattern_only_the_references_model_is_kept():
    passes = _passes()
    pattern = _flipped(passes)
    passes.underflow("float32"), passes.kink_effects("float32", passes.model("float32").grad_bound)
    held = passes.held(pattern)
    assert (held.fwd, held.deltas, held.pattern) == (pattern.fwd, pattern.deltas, pattern)
    assert held.models == {"float64": passes.model("float64")} and held.models is not passes.models
    assert held.underflows == {} and held.kinks == {}
    # The passes it came from are as they were, memos and all.
    assert passes.pattern is None and passes.fwd is not pattern.fwd
    assert set(passes.models) == {"float32", "float64"} and "float32" in passes.kinks
    assert held.model("float32") is not passes.model("float32")  # the pattern's own


def test_held_at_float64s_own_pattern_shares_the_models_but_judges_kinks_anew():
    passes = _passes()
    same = _pattern.held(passes.fwd, passes.deltas, passes.fwd.masks)
    assert not len(same.flipped)
    held = passes.held(same)
    assert held.models is passes.models and held.underflows is passes.underflows
    assert held.kinks is not passes.kinks and held.pattern is same


def test_the_oracles_float64_model_is_kept_only_where_it_fits():
    passes = _passes()
    directions = sign_directions(8, 2, 6, SIGNS)
    plain = rounding.rounding_model(passes.fwd, passes.deltas, "float64")
    along = rounding.rounding_model(passes.fwd, passes.deltas, "float64", directions=directions)
    passes.reuse(rounding.rounding_model(passes.fwd, passes.deltas, "float32"))  # not float64
    passes.reuse(along)  # made along directions these passes do not have
    passes.reuse("not a model")
    assert passes.models == {}
    passes.reuse(plain)
    passes.reuse(rounding.rounding_model(passes.fwd, passes.deltas, "float64"))  # the first one stays
    assert passes.model("float64") is plain
    screened = _passes().along(directions)
    screened.reuse(plain)
    assert screened.models == {}
    screened.reuse(along)
    assert screened.model("float64") is along


def test_the_oracles_answer_moves_only_to_a_pattern_that_differs():
    passes = _passes()
    shape = passes.weights.shape
    answer = GradAnswer(np.zeros(shape), np.zeros(shape))
    assert passes.answer(answer) is answer
    assert passes.held(_pattern.held(passes.fwd, passes.deltas, passes.fwd.masks)).answer(answer) is answer
    moved = passes.held(_flipped(passes)).answer(answer)
    assert np.any(moved.value != 0) and np.all(moved.error >= 0) and np.all(answer.value == 0)
