"""A JAX program run with its products rounded as a device rounds them (``backends/jax/rounded.py``): the
device model of a side's reduced-precision products, made on the host."""

from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")

from crosscheck.backends.jax import rounded  # noqa: E402

R = np.random.default_rng(0)
A, B = R.standard_normal((16, 24)).astype(np.float32), R.standard_normal((24, 8)).astype(np.float32)


def _bf16(x):
    return np.asarray(jnp.asarray(x).astype(jnp.bfloat16).astype(jnp.float32), np.float64)


def test_a_product_takes_its_inputs_rounded_to_the_unit_and_sums_in_float32():
    got = np.asarray(rounded.rounded(jnp.matmul, 7)(A, B), np.float64)
    assert np.allclose(got, _bf16(A) @ _bf16(B), rtol=1e-6, atol=1e-6)
    assert not np.allclose(got, A.astype(np.float64) @ B, rtol=1e-4, atol=1e-4)
    assert rounded.mantissa(2.0**-8) == 7 and rounded.mantissa(2.0**-11) == 10


def test_the_products_inside_what_a_program_holds_are_rounded_too():
    """Inside a jit, a scan's body, a cond's branches, a checkpoint and a custom derivative's primal."""

    @jax.custom_jvp
    def kernel(x, w):
        return jnp.tanh(x @ w)

    kernel.defjvp(lambda p, t: (kernel(*p), t[0] @ p[1]))

    def f(x, ws):
        inner = jax.jit(lambda y, w: jax.checkpoint(kernel)(y, w))
        y, _ = jax.lax.scan(lambda c, w: (inner(c, w), None), x, ws)
        return jax.lax.cond(True, lambda y: y @ y.T, lambda y: y @ y.T, y)

    ws = np.stack([R.standard_normal((24, 24)).astype(np.float32) for _ in range(2)])
    x = A
    exact = np.asarray(f(x, ws), np.float64)

    def by_hand(x, ws):
        y = _bf16(x)
        for w in ws:
            y = _bf16(np.tanh(y @ _bf16(w)).astype(np.float32))
        return y @ y.T

    got = np.asarray(rounded.rounded(f, 7)(x, ws), np.float64)
    assert np.abs(got - by_hand(x, ws)).max() < 1e-3 * np.abs(exact).max()
    assert np.abs(got - exact).max() > 1e-3 * np.abs(exact).max()  # every product rounded: far from float32


def test_a_gradient_s_backward_products_are_rounded_and_highest_is_left_alone():
    loss = lambda w: jnp.sum(jnp.tanh(A @ w) ** 2)  # noqa: E731
    exact = np.asarray(jax.grad(loss)(B), np.float64)
    got = np.asarray(rounded.rounded(jax.grad(loss), 7)(B), np.float64)
    assert 1e-4 < np.abs(got - exact).max() / np.abs(exact).max() < 0.1
    pinned = lambda w: jnp.sum(jnp.tanh(jnp.matmul(A, w, precision="highest")) ** 2)  # noqa: E731
    same = np.asarray(rounded.rounded(jax.grad(pinned), 7)(B), np.float64)
    assert np.abs(same - np.asarray(jax.grad(pinned)(B), np.float64)).max() < 1e-5 * np.abs(exact).max()


def test_the_adapters_make_the_device_model_of_their_gradient():
    """``modelled(params, inputs, unit)``: the stack's and a workload's gradient with the device's products
    (None: as ``grad`` makes it), what a classification bounds a reduced precision by."""
    from crosscheck.backends.jax.stack import JaxBackend
    from crosscheck.backends.jax.workload import JaxWorkloadBackend

    rng = np.random.default_rng(1)
    weights, x = (
        rng.standard_normal((3, 8, 8)).astype(np.float32),
        rng.standard_normal((4, 8)).astype(np.float32),
    )
    stack = JaxBackend()
    plain = stack.modelled({"weights": weights}, {"x": x}, None)["weights"]
    assert np.array_equal(plain, stack.grad(weights, x))
    model = stack.modelled({"weights": weights}, {"x": x}, 2.0**-8)["weights"]
    assert 1e-5 < np.abs(model - plain).max() / np.abs(plain).max() < 0.2
    side = JaxWorkloadBackend("jax", lambda p, i: jnp.sum(jnp.tanh(i["x"] @ p["w"]) ** 2))
    params, inputs = {"w": B}, {"x": A}
    assert np.array_equal(side.modelled(params, inputs, None)["w"], side.grad(params, inputs)["w"])
    assert not np.array_equal(side.modelled(params, inputs, 2.0**-8)["w"], side.grad(params, inputs)["w"])
