"""The finite-difference oracle: exact answers, error bars that cover, kinks, no autodiff."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from exact import as_float, exact_gradient

import crosscheck

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


@pytest.fixture(scope="module")
def oracle():
    return crosscheck.load_backend("numpy-fd")


@pytest.mark.parametrize(
    "case", SMALL_CASES, ids=[f"{c.init}-L{c.layers}-d{c.dim}-{c.dtype}" for c in SMALL_CASES]
)
def test_matches_exact_gradient_and_error_bound_covers(oracle, case):
    weights, x = crosscheck.make_inputs(case)
    exact = as_float(exact_gradient(weights, x))
    est = oracle.estimate(weights, x)
    error = np.abs(est.value - exact)
    scale = max(np.abs(exact).max(), 1e-300)
    assert error.max() <= 1e-12 * scale
    uncovered = error > est.error
    assert not uncovered.any(), f"bound misses {uncovered.sum()} entries, worst {error[uncovered].max()}"


def test_exact_zero_gets_derivative_zero_where_a_plain_central_difference_gives_half(oracle):
    # z[0] = x @ W[0] = [1, 0]: unit 1 sits exactly on the kink. To its right the loss grows with slope
    # 4 in W[0][:, 1], to its left it is flat; a central difference straddling it gives 2 (the average),
    # the convention (and every autodiff backend) gives 0.
    weights = np.array([[[1.0, 1.0], [0.0, -1.0]], [[1.0, 1.0], [1.0, 1.0]]])
    x = np.array([[1.0, 1.0]])
    est = oracle.estimate(weights, x)
    np.testing.assert_array_equal(est.value, [[[4.0, 0.0], [4.0, 0.0]], [[2.0, 2.0], [0.0, 0.0]]])
    assert est.kink[0, 0, 1] and est.kink[0, 1, 1] and est.kink.sum() == 2
    assert tuple(est.kink_at[0, 0, 1]) == (0, 0, 1)

    def loss(w):
        y = x
        for layer in w:
            y = np.maximum(y @ layer, 0)
        return float(np.sum(y**2))

    h = 2.0**-10
    plus, minus = weights.copy(), weights.copy()
    plus[0, 0, 1] += h
    minus[0, 0, 1] -= h
    assert (loss(plus) - loss(minus)) / (2 * h) == pytest.approx(2.0, abs=1e-2)


def test_step_is_the_largest_that_crosses_no_kink(oracle):
    # z = 1 * w: the only kink is at w = 0, distance 0.75 from w; the step stays below it.
    weights = np.array([[[0.75]]])
    est = oracle.estimate(weights, np.array([[1.0]]))
    assert 0 < est.step[0, 0, 0] < 0.75
    assert est.value[0, 0, 0] == 1.5  # exactly 2 * w * x**2
    assert not est.kink.any()


def test_does_not_modify_inputs_and_uses_no_autodiff(oracle):
    weights, x = crosscheck.make_inputs(crosscheck.Case(layers=3, dim=4, batch=2))
    before = weights.copy(), x.copy()
    loaded = set(sys.modules)
    oracle.estimate(weights, x)
    np.testing.assert_array_equal(weights, before[0])
    np.testing.assert_array_equal(x, before[1])
    new = set(sys.modules) - loaded
    assert not [m for m in new if m.split(".")[0] in ("jax", "torch", "autograd")]


def test_progress_is_reported(oracle):
    weights, x = crosscheck.make_inputs(crosscheck.Case(layers=3, dim=4, batch=2))
    seen = []
    oracle.estimate(weights, x, progress=lambda done, total: seen.append((done, total)))
    assert seen[-1] == (48, 48)
    assert [done for done, _ in seen] == sorted(done for done, _ in seen)


@pytest.mark.parametrize(
    "case", SMALL_CASES[:6], ids=[f"{c.init}-L{c.layers}-d{c.dim}" for c in SMALL_CASES[:6]]
)
def test_screening_directional_derivatives_are_exact_within_their_bars(oracle, case):
    weights, x = crosscheck.make_inputs(case)
    exact = as_float(exact_gradient(weights, x))
    directions = np.random.default_rng(0).choice([-1.0, 1.0], size=(case.layers, 3, case.dim, case.dim))
    screened = oracle.screen(weights, x, directions)
    expected = np.einsum("kij,ksij->ks", exact, directions)
    error = np.abs(screened.value - expected)
    assert error.max() <= 1e-12 * max(np.abs(exact).max(), 1e-300) * case.dim**2
    assert np.all(error <= screened.error)
    assert screened.evaluations >= 2 * case.layers * 3


def test_estimate_of_some_layers_leaves_the_others_nan(oracle):
    weights, x = crosscheck.make_inputs(crosscheck.Case(layers=4, dim=3, batch=2, dtype="float64"))
    est = oracle.estimate(weights, x, layers=[2])
    assert np.isnan(est.value[[0, 1, 3]]).all()
    np.testing.assert_allclose(est.value[2], as_float(exact_gradient(weights, x))[2], rtol=1e-12, atol=1e-15)
