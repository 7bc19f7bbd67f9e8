"""The brief's worked values for stop_gradient, the straight-through estimator, stacked grads and an
HVP, each reproduced in JAX and in PyTorch (``/work/shared/brief``, "Stopping and stacking")."""

from __future__ import annotations

import math

import numpy as np
import pytest

jax = pytest.importorskip("jax")
torch = pytest.importorskip("torch")
jnp = jax.numpy


def test_stop_gradient_jax():
    x = jnp.array([1.0, 2.0, 3.0])

    def cut(x):
        return jnp.sum(x * jax.lax.stop_gradient(x))

    assert float(cut(x)) == 14.0
    np.testing.assert_array_equal(jax.grad(cut)(x), [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(jax.grad(lambda v: jnp.sum(v * v))(x), [2.0, 4.0, 6.0])


def test_stop_gradient_torch():
    x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    value = torch.sum(x * x.detach())
    value.backward()
    assert float(value.detach()) == 14.0
    np.testing.assert_array_equal(x.grad.numpy(), [1.0, 2.0, 3.0])
    y = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    torch.sum(y * y).backward()
    np.testing.assert_array_equal(y.grad.numpy(), [2.0, 4.0, 6.0])


def test_straight_through_jax():
    def ste(x):
        return x + jax.lax.stop_gradient(jnp.round(x) - x)

    y = jnp.array([0.2, 1.7, -0.5])
    np.testing.assert_array_equal(ste(y), [0.0, 2.0, 0.0])
    np.testing.assert_array_equal(jax.grad(lambda v: jnp.sum(ste(v)))(y), [1.0, 1.0, 1.0])
    np.testing.assert_array_equal(jax.grad(lambda v: jnp.sum(jnp.round(v)))(y), [0.0, 0.0, 0.0])


def test_straight_through_torch():
    y = torch.tensor([0.2, 1.7, -0.5], requires_grad=True)
    out = y + (torch.round(y) - y).detach()
    np.testing.assert_array_equal(out.detach().numpy(), [0.0, 2.0, 0.0])
    out.sum().backward()
    np.testing.assert_array_equal(y.grad.numpy(), [1.0, 1.0, 1.0])
    z = torch.tensor([0.2, 1.7, -0.5], requires_grad=True)
    torch.round(z).sum().backward()
    np.testing.assert_array_equal(z.grad.numpy(), [0.0, 0.0, 0.0])


def test_four_stacked_grads_of_sin_jax():
    d0 = jnp.sin
    d1 = jax.grad(d0)
    d2 = jax.grad(d1)
    d3 = jax.grad(d2)
    got = [float(f(0.7)) for f in (d0, d1, d2, d3)]
    want = [float(v) for v in (jnp.sin(0.7), jnp.cos(0.7), -jnp.sin(0.7), -jnp.cos(0.7))]
    assert got == want  # digit for digit, as the brief says
    np.testing.assert_allclose(got, [0.64421767, 0.7648422, -0.64421767, -0.7648422], rtol=1e-7)


def test_four_stacked_grads_of_sin_torch():
    x = torch.tensor(0.7, requires_grad=True)
    values = [torch.sin(x)]
    for _ in range(3):
        (g,) = torch.autograd.grad(values[-1], x, create_graph=True)
        values.append(g)
    got = [float(v.detach()) for v in values]
    t = torch.tensor(0.7)
    want = [float(v) for v in (torch.sin(t), torch.cos(t), -torch.sin(t), -torch.cos(t))]
    np.testing.assert_allclose(got, want, rtol=2**-23, atol=0)
    np.testing.assert_allclose(got, [math.sin(0.7), math.cos(0.7), -math.sin(0.7), -math.cos(0.7)], rtol=1e-6)


def test_hvp_matches_hessian_times_u_jax():
    w = jnp.ones((32, 32)) * 0.01

    def loss(x):
        return jnp.sum(jnp.tanh(x @ w) ** 2)

    x, u = jnp.ones(32), jnp.arange(32.0) / 32.0
    hvp = jax.jvp(jax.grad(loss), (x,), (u,))[1]
    full = jax.hessian(loss)(x) @ u
    assert float(jnp.max(jnp.abs(hvp))) > 1e-3  # a real, non-zero product
    # float32 rounding: the brief measured 7.5e-09 on entries of size ~0.1.
    assert float(jnp.max(jnp.abs(hvp - full))) < 64 * 2**-24 * float(jnp.max(jnp.abs(hvp)))


def test_hvp_matches_hessian_times_u_torch():
    w = torch.ones(32, 32) * 0.01

    def loss(x):
        return torch.sum(torch.tanh(x @ w) ** 2)

    x, u = torch.ones(32), torch.arange(32.0) / 32.0
    _, hvp = torch.autograd.functional.hvp(loss, x, u)
    # torch.func.hessian (forward over reverse) warns about torch.jit.script inside torch 2.13; the
    # reverse-over-reverse Hessian is the same matrix.
    full = torch.autograd.functional.hessian(loss, x) @ u
    assert float(hvp.abs().max()) > 1e-3
    assert float((hvp - full).abs().max()) < 64 * 2**-24 * float(hvp.abs().max())


def test_hvp_jax_and_torch_agree():
    w = np.full((32, 32), 0.01, np.float32)
    x, u = np.ones(32, np.float32), (np.arange(32) / 32).astype(np.float32)
    hj = jax.jvp(jax.grad(lambda v: jnp.sum(jnp.tanh(v @ w) ** 2)), (x,), (u,))[1]
    _, ht = torch.autograd.functional.hvp(
        lambda v: torch.sum(torch.tanh(v @ torch.tensor(w)) ** 2), torch.tensor(x), torch.tensor(u)
    )
    np.testing.assert_allclose(np.asarray(hj), ht.numpy(), rtol=1e-5, atol=1e-7)
