"""The stack's Monte Carlo rounding model: the row-by-row estimate against direct sampling."""

from __future__ import annotations

import numpy as np
import pytest

import crosscheck
from crosscheck._compare.constants import UNIT_ROUNDOFF
from crosscheck._workloads.stack import rounding
from crosscheck._workloads.stack.forward import backward, forward


def _direct_sigma(fwd, deltas, dtype, samples, seed):
    """The gradient error's spread sampled directly: every product, the gradient's too, gets its noise,
    and the spread of ``noisy y.T @ noisy delta - y.T @ delta`` is taken over the samples."""
    u, rng = UNIT_ROUNDOFF[dtype], np.random.default_rng(seed)
    y = np.broadcast_to(fwd.ys[0], (samples, *fwd.ys[0].shape))
    noisy = [y]
    for m, w in enumerate(fwd.weights):
        z = y @ w + rng.standard_normal(y.shape) * rounding.fresh_sigma(fwd.ys[m], w, u, False)
        y = z * fwd.masks[m]
        noisy.append(y)
    g, sigma = 2.0 * y, np.zeros_like(fwd.weights)
    for m in reversed(range(len(fwd.weights))):
        delta = g * fwd.masks[m]
        grad = np.swapaxes(noisy[m], 1, 2) @ delta
        fresh = rounding.fresh_sigma(fwd.ys[m].T, deltas[m], u, False)
        error = grad + rng.standard_normal(grad.shape) * fresh - fwd.ys[m].T @ deltas[m]
        sigma[m] = np.sqrt(np.mean(error**2, axis=0))
        noise = rounding.fresh_sigma(deltas[m], fwd.weights[m].T, u, False)
        g = delta @ fwd.weights[m].T + rng.standard_normal(delta.shape) * noise
    return sigma


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_row_by_row_estimate_agrees_with_direct_sampling(dtype):
    case = crosscheck.Case(layers=4, batch=6, dim=5, dtype="float64", seed=2)
    fwd = forward(*crosscheck.make_inputs(case))
    deltas, _ = backward(fwd)
    model = rounding.rounding_model(fwd, deltas, dtype)
    direct = _direct_sigma(fwd, deltas, dtype, samples=4000, seed=9)
    live = direct > 0
    np.testing.assert_array_equal(model.grad_sigma[~live], 0.0)  # entries no error reaches (dead units)
    ratio = model.grad_sigma[live] / direct[live]
    # 64 samples against 4000: a 64-sample spread is within ~9% of the truth (one sigma), more when
    # several rows contribute; 0.7 and 1.4 are ~4 sigma out.
    assert 0.95 < np.median(ratio) < 1.05
    assert 0.7 < ratio.min() and ratio.max() < 1.4


def test_direction_spread_of_a_single_entry_is_that_entry_spread():
    case = crosscheck.Case(layers=3, batch=4, dim=4, dtype="float32", seed=1)
    fwd = forward(*crosscheck.make_inputs(case))
    deltas, _ = backward(fwd)
    directions = np.zeros((3, 2, 4, 4))
    directions[:, 0, 1, 2] = 1.0
    directions[:, 1, 3, 0] = -1.0
    model = rounding.rounding_model(fwd, deltas, "float32", directions=directions)
    assert model.direction_sigma is not None
    np.testing.assert_allclose(model.direction_sigma[:, 0], model.grad_sigma[:, 1, 2], rtol=1e-10)
    np.testing.assert_allclose(model.direction_sigma[:, 1], model.grad_sigma[:, 3, 0], rtol=1e-10)


def test_exact_products_add_no_rounding():
    case = crosscheck.Case(layers=3, batch=4, dim=4, dtype="float64", seed=1, init="integer")
    fwd = forward(*crosscheck.make_inputs(case))
    deltas, _ = backward(fwd)
    model = rounding.rounding_model(fwd, deltas, "float64")
    assert not model.grad_sigma.any()
    assert not any(s.any() for s in model.z_sigma)
