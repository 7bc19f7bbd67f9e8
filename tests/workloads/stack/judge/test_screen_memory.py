"""The screened judge holds the stack's gradient-sized arrays a layer at a time where it can (issue 38:
``--dim 4096`` was refused, its estimate 27.8 GiB, most of it float64 ``(L, d, d)`` arrays held at
once: squares and transposed copies of the weights, the kink threshold and a copy of the tolerance,
the strongest change per entry, zero underflow bounds, the kink judgement kept for the whole run)."""

from __future__ import annotations

import tracemalloc

import numpy as np

from crosscheck._compare.constants import SAFETY
from crosscheck._records import Oracle
from crosscheck._workloads.protocol import Options
from crosscheck._workloads.stack import rounding
from crosscheck._workloads.stack import underflow as _underflow
from crosscheck._workloads.stack.judge.grad import StackGradJudge
from crosscheck._workloads.stack.judge.passes import Passes
from crosscheck._workloads.stack.workload import Stack

LAYERS, BATCH, DIM = 8, 8, 192
#: One float64 ``(L, d, d)`` array.
E = 8 * LAYERS * DIM * DIM


def _passes(init: str = "nearzero") -> Passes:
    """The passes a screened judge prepares."""
    point = Stack(layers=LAYERS, batch=BATCH, dim=DIM, init=init).point(dtype="float32", seed=2)
    return StackGradJudge(point, Options(oracle=Oracle("screen"))).passes


def _peak_of(function, *args, **kwargs) -> tuple[int, object]:
    """What ``function`` allocates at its peak beyond what was allocated when it was called."""
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        found = function(*args, **kwargs)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak - before, found


def test_the_kink_judgement_makes_four_gradient_sized_arrays_at_most():
    """Its results (count and culprit, int32: one array; the changes and the minor sums: two) and
    ``|W|``; the threshold (``0.25 * tol``), the strongest change so far and a copy of the tolerance
    for the memo were three more (7.2 E measured before)."""
    passes = _passes()
    tol = passes.model("float32").grad_bound
    passes.model("float64"), passes.underflow("float32")  # made before: not the judgement's own
    peak, (_, found, effects) = _peak_of(passes.kink_effects, "float32", tol)
    assert len(found) and (effects.count > 1).any()  # the case has kinks, several for some entries
    # four arrays, the (d, d) temporaries of a layer and the (N, d) bounds
    assert peak < 5.75 * E, peak / E


def test_the_kink_judgement_is_memoised_by_digest_and_forgotten_on_request():
    passes = _passes()
    tol = passes.model("float32").grad_bound
    first = passes.kink_effects("float32", tol)
    assert passes.kink_effects("float32", tol.copy())[2] is first[2]  # the same tolerance: the same judgement
    moved = tol.copy()
    moved[0, 0, 0] = np.nextafter(moved[0, 0, 0], np.inf)
    assert passes.kink_effects("float32", moved)[2] is not first[2]  # one entry one ulp apart: again
    passes.forget_kinks("float32")
    again = passes.kink_effects("float32", tol)
    assert again[2] is not first[2]
    scaled = passes.kink_effects("float32", passes.model("float32").grad_sigma, SAFETY)
    assert scaled[2] is not again[2]  # another key: judged again, alike
    for name in ("count", "alternative", "culprit", "minor"):
        assert np.array_equal(getattr(again[2], name), getattr(first[2], name)), name
        assert np.array_equal(getattr(scaled[2], name), getattr(first[2], name)), name


def test_the_rounding_model_holds_no_square_or_transposed_copy_of_every_layer():
    """Its parts' variances (two) and the result, made in place from one of them; the squares and
    the transposed copies of the weights were two more, for as long as the pass was kept."""
    # few rows, wide layers: the samples' activations (64 of each row) are a small part
    layers, dim = 8, 384
    point = Stack(layers=layers, batch=2, dim=dim).point(dtype="float32", seed=2)
    passes = StackGradJudge(point, Options(oracle=Oracle("screen"))).passes
    peak, model = _peak_of(rounding.rounding_model, passes.fwd, passes.deltas, "float32")
    assert model.grad_sigma.shape == passes.weights.shape
    assert peak < 3.6 * 8 * layers * dim * dim, peak / (8 * layers * dim * dim)
    assert not hasattr(passes.fwd, "squared_weights")


def test_a_zero_underflow_bound_takes_no_memory():
    passes = _passes("gaussian")
    peak, flow = _peak_of(_underflow.underflow, passes.fwd, passes.deltas, "float32")
    assert not flow.grad.any() and flow.grad.shape == passes.weights.shape
    assert peak < 0.1 * E, peak / E
