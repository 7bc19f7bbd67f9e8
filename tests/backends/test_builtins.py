"""Every built-in backend: known answers, an exact case, immutability, dtype, agreement."""

from __future__ import annotations

import numpy as np
import pytest
from exact import as_float, exact_gradient

import crosscheck


@pytest.mark.parametrize("layers", [3, 8], ids=["3-layers", "8-layers"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_identity_stack_gradient_is_all_two(backend, layers, dtype):
    weights = np.stack([np.eye(2, dtype=dtype)] * layers)
    x = np.ones((1, 2), dtype=dtype)
    grad = np.asarray(backend.grad(weights, x))
    assert grad.shape == (layers, 2, 2)
    np.testing.assert_array_equal(grad, 2.0)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_returns_the_inputs_dtype_or_float64_for_the_oracle(backend, dtype):
    weights, x = crosscheck.make_inputs(crosscheck.Case(layers=2, dim=3, batch=2, dtype=dtype))
    expected = "float64" if backend.name == "numpy-fd" else dtype
    assert np.asarray(backend.grad(weights, x)).dtype == np.dtype(expected)


@pytest.mark.parametrize(
    "case",
    [
        crosscheck.Case(layers=3, batch=2, dim=3, dtype="float64", seed=1),
        crosscheck.Case(layers=8, batch=3, dim=2, dtype="float64", seed=2),
        crosscheck.Case(layers=4, batch=2, dim=3, dtype="float64", seed=3, init="integer"),
        crosscheck.Case(layers=1, batch=1, dim=1, dtype="float64", seed=4),
    ],
    ids=["gaussian-3", "gaussian-8", "integer-exact-zeros", "scalar"],
)
def test_matches_the_exact_rational_gradient(backend, case):
    weights, x = crosscheck.make_inputs(case)
    exact = as_float(exact_gradient(weights, x))
    grad = np.asarray(backend.grad(weights, x), dtype=np.float64)
    scale = max(np.abs(exact).max(), 1e-300)
    assert np.abs(grad - exact).max() <= 1e-12 * scale


def test_exact_zero_pre_activation_has_derivative_zero(backend):
    # z = x @ W = [1, 0]: the second unit sits exactly on the kink; its weights get derivative 0.
    weights = np.array([[[1.0, 1.0], [0.0, -1.0]]])
    x = np.array([[1.0, 1.0]])
    grad = np.asarray(backend.grad(weights, x))
    np.testing.assert_array_equal(grad, [[[2.0, 0.0], [2.0, 0.0]]])


@pytest.mark.parametrize("init", ["gaussian", "integer"])
def test_inputs_are_not_modified(backend, init):
    weights, x = crosscheck.make_inputs(crosscheck.Case(layers=4, batch=3, dim=5, init=init))
    before = weights.copy(), x.copy()
    backend.grad(weights, x)
    np.testing.assert_array_equal(weights, before[0])
    np.testing.assert_array_equal(x, before[1])


def test_jax_float64_really_runs_in_float64_and_does_not_leak_x64():
    jax = pytest.importorskip("jax")
    backend = crosscheck.load_backend("jax")
    weights, x = crosscheck.make_inputs(crosscheck.Case(layers=3, dim=4, batch=2, dtype="float64"))
    exact = as_float(exact_gradient(weights, x))
    grad = backend.grad(weights, x)
    assert grad.dtype == np.float64
    # float32 arithmetic would be off by ~1e-7; float64 is off by ~1e-16.
    assert np.abs(grad - exact).max() <= 1e-13 * np.abs(exact).max()
    assert not jax.config.jax_enable_x64
    assert jax.numpy.ones(1).dtype == np.float32
