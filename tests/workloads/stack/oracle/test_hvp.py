"""The HVP oracle: its answer within its error bars at every entry and along random directions, and
the radius within which no ReLU changes sign along the direction."""

from __future__ import annotations

import numpy as np
import pytest

import crosscheck
from crosscheck import Case, make_inputs
from crosscheck._workloads.stack.oracle.hvp import direction, kink_radius

SMALL = {"layers": 3, "batch": 4, "dim": 3}


def _inputs(dtype="float64", seed=2, **shape):
    return make_inputs(Case(**{**SMALL, **shape}, dtype=dtype, seed=seed))


def test_oracle_hvp_is_within_its_error_bar():
    jax_backend = crosscheck.load_backend("jax")
    oracle = crosscheck.load_backend("numpy-fd")
    weights, x = _inputs(layers=4, batch=4, dim=5, seed=2)
    v = direction(weights, 2)
    est = oracle.hvp_estimate(weights, x, v)
    exact = jax_backend.hvp(weights, x, v)
    assert not est.kink.any() and est.radius > 0 and len(est.nodes) == 8 * 4  # 2L nodes a row
    assert np.all(np.abs(est.value - exact) <= est.error)
    assert np.max(est.error) < 1e-6 * np.abs(exact).max()  # the bar is tight enough to mean something


def test_kink_radius_is_the_distance_to_the_first_sign_change():
    # One layer, one unit: z(t) = x (w + t v) changes sign at t = -w / v exactly.
    weights, x = np.array([[[0.5]]]), np.array([[2.0]])
    radius, at = kink_radius(weights, x, np.array([[[-2.0]]]))
    assert radius == pytest.approx(0.25) and at == (0, 0, 0)


def test_screened_oracle_is_the_full_oracle_projected_within_both_bars():
    weights, x = _inputs(layers=4, dim=5, seed=4)
    v = direction(weights, 4)
    oracle = crosscheck.load_backend("numpy-fd")
    directions = np.random.default_rng(1).choice([-1.0, 1.0], size=(4, 3, 5, 5))
    full = oracle.hvp_estimate(weights, x, v)
    screened = oracle.hvp_screen(weights, x, v, directions)
    projected = np.einsum("kij,ksij->ks", full.value, directions)
    bar = screened.error + np.einsum("kij,ksij->ks", full.error, np.abs(directions))
    assert not screened.kink.any()
    assert np.all(np.abs(screened.value - projected) <= bar)
    assert screened.evaluations < full.evaluations / 4
