"""The oracle that differences the loss in each layer's outputs (``oracle/preactivation.py``): every
entry with an error bar that covers the exact gradient, the entry-by-entry oracle's answer and kink
flags, the known answer, and a lone wrong entry that a screen cannot see."""

from __future__ import annotations

import sys
import tracemalloc

import numpy as np
import planted
import pytest
from exact import as_float, exact_gradient

import crosscheck
from crosscheck._compare import terms
from crosscheck._compare.constants import UNIT_ROUNDOFF
from crosscheck._workloads.stack import rounding as _stack
from crosscheck._workloads.stack.forward import backward, forward
from crosscheck._workloads.stack.oracle import fd
from crosscheck._workloads.stack.oracle import preactivation as pa

#: The entry-by-entry oracle's test cases (``test_oracle.py``), every init and scale.
SMALL_CASES = [
    crosscheck.Case(layers=layers, batch=batch, dim=dim, dtype=dtype, seed=seed, init=init, scale=scale)
    for seed, (layers, batch, dim, dtype, init, scale) in enumerate(
        [
            (8, 3, 3, "float64", "gaussian", 1.0),
            (8, 2, 4, "float32", "gaussian", 1.0),
            (3, 4, 2, "float64", "gaussian", 1e3),
            (8, 1, 1, "float64", "gaussian", 1.0),
            (5, 3, 3, "float32", "integer", 1.0),
            (8, 2, 3, "float64", "integer", 1.0),
            (8, 3, 3, "float32", "nearzero", 1.0),
            (6, 2, 4, "float64", "gaussian", 1e-3),
            (8, 3, 2, "float32", "identity", 1.0),
            (2, 4, 4, "float32", "gaussian", 1.0),
        ]
    )
]


def _random_cases(count: int) -> list[crosscheck.Case]:
    """Small cases of every init, dtype and scale, a third of them kink-heavy integer ones."""
    rng = np.random.default_rng(65)
    cases = []
    for seed in range(count):
        layers, batch, dim = int(rng.integers(1, 9)), int(rng.integers(1, 6)), int(rng.integers(1, 10))
        init = str(rng.choice(["gaussian", "integer", "integer", "nearzero", "identity"]))
        dtype, scale = str(rng.choice(["float32", "float64"])), float(rng.choice([1.0, 1e-3, 1e3, 3.7]))
        cases.append(crosscheck.Case(layers, batch, dim, dtype, seed, init, scale))
    return cases


@pytest.mark.parametrize(
    "case", SMALL_CASES, ids=[f"{c.init}-L{c.layers}-d{c.dim}-{c.dtype}" for c in SMALL_CASES]
)
def test_matches_exact_gradient_and_error_bound_covers(case):
    weights, x = crosscheck.make_inputs(case)
    exact = as_float(exact_gradient(weights, x))
    est = pa.estimate(weights, x)
    error = np.abs(est.value - exact)
    assert error.max() <= 1e-12 * max(np.abs(exact).max(), 1e-300)
    uncovered = error > est.error
    assert not uncovered.any(), f"bound misses {uncovered.sum()} entries, worst {error[uncovered].max()}"


def test_error_bars_cover_the_exact_gradient_on_many_random_cases():
    # A kink no step avoids may be float64's rounding of a pre-activation whose exact value has the other
    # sign (integers times 3.7 are not exact in float64): such an entry is flagged, its value the
    # float64 piece's (the judge leaves it unjudgeable); every other entry is covered.
    worst, flagged = 0.0, 0
    for case in _random_cases(120):
        weights, x = crosscheck.make_inputs(case)
        exact = as_float(exact_gradient(weights, x))
        est = pa.estimate(weights, x)
        error = np.abs(est.value - exact)
        uncovered = (error > est.error) & ~est.kink
        assert not uncovered.any(), f"{case}: bound misses {uncovered.sum()} entries"
        worst = max(worst, float(np.max(np.where(est.kink, 0.0, error / np.maximum(est.error, 1e-300)))))
        flagged += int(est.kink.sum())
    assert worst < 0.5, worst  # the bars are bounds, not estimates: far from every error
    assert flagged > 100  # the cases do put entries on kinks


@pytest.mark.parametrize("dim", [64, 128])
def test_error_bars_cover_the_float64_backward_pass_within_its_rounding(dim):
    # At widths past exact arithmetic: the NumPy float64 backward pass (no autodiff), off from the exact
    # gradient by its own float64 rounding (the rounding model's bound).
    weights, x = crosscheck.make_inputs(crosscheck.Case(dim=dim, batch=8, seed=dim))
    est = pa.estimate(weights, x)
    fwd = forward(weights, x)
    deltas, grads = backward(fwd)
    model = _stack.rounding_model(fwd, deltas, "float64")
    assert not est.kink.any()
    assert np.all(np.abs(est.value - np.array(grads)) <= est.error + model.grad_bound)


@pytest.mark.parametrize(
    "case",
    [
        crosscheck.Case(layers=8, batch=4, dim=12, dtype="float64", seed=1),
        crosscheck.Case(layers=8, batch=8, dim=24, dtype="float32", seed=2),
        crosscheck.Case(layers=6, batch=4, dim=16, dtype="float32", seed=3, init="integer"),
        crosscheck.Case(layers=8, batch=3, dim=12, dtype="float64", seed=4, init="integer"),
        crosscheck.Case(layers=8, batch=8, dim=20, dtype="float32", seed=5, init="integer"),
    ],
    ids=["gaussian-12", "gaussian-24", "integer-16", "integer-12", "integer-20"],
)
def test_agrees_with_the_entry_by_entry_oracle_and_flags_the_same_kinks(case):
    # Integer inputs put pre-activations on exact zeros, in this layer and later ones: both oracles
    # flag the same entries, each with an exact zero.
    weights, x = crosscheck.make_inputs(case)
    new, old = pa.estimate(weights, x), fd.estimate(weights, x)
    assert np.all(np.abs(new.value - old.value) <= new.error + old.error)
    np.testing.assert_array_equal(new.kink, old.kink)
    fwd = forward(weights, x)
    for at in new.kink_at[new.kink]:
        assert fwd.zs[at[0]][at[1], at[2]] == 0
    assert np.all(new.kink_at[~new.kink] == -1)
    if case.init == "integer":
        assert new.kink.any()


@pytest.mark.parametrize("batch", [1, 3])
def test_known_answer_identity_weights_and_ones_give_two_per_row(batch):
    weights, x = crosscheck.make_inputs(crosscheck.Case(layers=3, batch=batch, dim=2, init="identity"))
    est = pa.estimate(weights, x)
    np.testing.assert_array_equal(est.value, np.full((3, 2, 2), 2.0 * batch))
    assert not est.kink.any()
    assert np.all(est.error < 1e-12)


def test_an_exact_zero_gets_derivative_zero_and_is_flagged_with_its_kink():
    # z[0] = x @ W[0] = [1, 0]: unit 1 of layer 0 sits exactly on the kink. A central difference across
    # it would give 2 in W[0][:, 1] (the average of the slopes 4 and 0); the convention gives 0.
    weights = np.array([[[1.0, 1.0], [0.0, -1.0]], [[1.0, 1.0], [1.0, 1.0]]])
    x = np.array([[1.0, 1.0]])
    est = pa.estimate(weights, x)
    np.testing.assert_array_equal(est.value, [[[4.0, 0.0], [4.0, 0.0]], [[2.0, 2.0], [0.0, 0.0]]])
    np.testing.assert_array_equal(est.kink, fd.estimate(weights, x).kink)
    assert est.kink.sum() == 2 and est.kink[0, 0, 1] and est.kink[0, 1, 1]
    assert tuple(est.kink_at[0, 0, 1]) == tuple(est.kink_at[0, 1, 1]) == (0, 0, 1)


def test_a_later_exact_zero_flags_every_entry_its_output_feeds():
    # z[1] = [0, 3, 3]: layer 1's unit 0 is exactly 0, and moving layer 0's outputs 0 or 1 moves it (by
    # W[1][0, 0] and W[1][1, 0]), output 2 does not. No step avoids that kink for the first two: every
    # entry of layer 0's columns 0 and 1 (each fed by a nonzero input) is flagged with it.
    weights = np.array([np.eye(3), [[1.0, 1.0, 1.0], [-1.0, 1.0, 1.0], [0.0, 1.0, 1.0]]])
    x = np.ones((1, 3))
    est = pa.estimate(weights, x)
    assert est.kink[0, :, :2].all() and not est.kink[0, :, 2].any()
    assert tuple(est.delta_kink_at[0, 0, 1]) == (1, 0, 0)
    assert {tuple(at) for at in est.kink_at[est.kink]} == {(1, 0, 0)}
    np.testing.assert_array_equal(est.kink, fd.estimate(weights, x).kink)
    # The piece's derivative (unit (1, 0, 0) off, as at an exact zero), exactly.
    np.testing.assert_array_equal(est.value, as_float(exact_gradient(weights, x)))


def test_does_not_modify_inputs_and_uses_no_autodiff():
    weights, x = crosscheck.make_inputs(crosscheck.Case(layers=3, dim=4, batch=2))
    before = weights.copy(), x.copy()
    loaded = set(sys.modules)
    pa.estimate(weights, x)
    np.testing.assert_array_equal(weights, before[0])
    np.testing.assert_array_equal(x, before[1])
    assert not [m for m in set(sys.modules) - loaded if m.split(".")[0] in ("jax", "torch", "autograd")]


def test_progress_counts_every_output_that_is_on():
    weights, x = crosscheck.make_inputs(crosscheck.Case(layers=4, dim=80, batch=3))
    seen = []
    pa.estimate(weights, x, progress=lambda done, total: seen.append((done, total)))
    on = sum(int(np.count_nonzero(mask)) for mask in forward(weights, x).masks[:-1])
    assert seen[-1] == (on, on)
    assert [done for done, _ in seen] == sorted(done for done, _ in seen)


def test_cost_is_about_two_evaluations_an_output_and_a_width_below_the_full_oracle():
    case = crosscheck.Case(layers=8, dim=64, batch=8)
    weights, x = crosscheck.make_inputs(case)
    est = pa.estimate(weights, x)
    on = sum(int(np.count_nonzero(mask)) for mask in forward(weights, x).masks[:-1])
    assert 2 * on <= est.evaluations <= 3 * on
    # The entry-by-entry oracle's dense count: per entry, two evaluations of the layers after it.
    full = 4 * 8 * 1024**4 * (8 * 7 // 2)
    assert pa.flops(8, 8, 1024) * 1024 < full


def test_memory_estimate_covers_the_peak():
    weights, x = crosscheck.make_inputs(crosscheck.Case(layers=8, dim=96, batch=8))
    tracemalloc.start()
    try:
        pa.estimate(weights, x)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak <= pa.memory(8, 8, 96) <= 3 * peak


def _off_at_rank(rank: int, factor: float):
    """A correct float32 gradient whose ``rank``-th largest entry (by magnitude) of the layer holding
    the largest is multiplied by ``factor``: below the 8 that a screen's spot check looks at."""

    def grad(weights, x):
        g = planted.correct(weights, x)
        layer = int(np.unravel_index(np.argmax(np.abs(g)), g.shape)[0])
        flat = np.argsort(np.abs(g[layer]).ravel())[-rank]
        row, col = np.unravel_index(flat, g.shape[1:])
        g[layer, row, col] *= factor
        return g

    return grad


def test_a_ninth_largest_entry_off_by_two_in_a_thousand_is_caught_entry_by_entry():
    # The screen's blind spot: an entry outside its layer's 8 largest is judged by random directions
    # alone, whose tolerance grows like d times an entry's. Every entry here has its own tolerance: the
    # candidate's modelled float32 rounding, the floor, and this oracle's error bar.
    weights, x = crosscheck.make_inputs(crosscheck.Case(dim=128, batch=8))
    est = pa.estimate(weights, x)
    fwd = forward(weights, x)
    model = _stack.rounding_model(fwd, backward(fwd, grads=False)[0], "float32")
    floor = terms.floor(terms.largest(est.value), UNIT_ROUNDOFF["float32"], ulps=terms.SAFETY_FLOOR_ULPS)
    tolerance = model.grad_bound + est.error + floor
    healthy = np.abs(planted.correct(weights, x) - est.value) > tolerance
    assert not healthy.any()
    wrong = np.abs(_off_at_rank(9, 1.002)(weights, x) - est.value) > tolerance
    assert wrong.sum() == 1
    layer = int(np.unravel_index(np.argmax(np.abs(est.value)), est.value.shape)[0])
    assert np.argwhere(wrong)[0][0] == layer
