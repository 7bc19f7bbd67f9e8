"""The Flax linen port of ``examples.port.custom_op``: the RMSNorm a ``jax.custom_vjp`` whose backward
is written by hand, with the planted bugs of ``custom_op.BUGS`` in it."""

from __future__ import annotations

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp


def rms_norm_forward(x, w, eps: float):
    """``x * r * w``, ``r = 1 / sqrt(mean(x^2) + eps)`` over the last axis: the op's forward, which JAX
    could differentiate itself."""
    return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + eps) * w


@functools.cache
def rms_norm(eps: float, bug: str = ""):
    """``(x, w) -> rms_norm_forward(x, w, eps)`` with a hand-written VJP (``bug``: one of
    ``custom_op.BUGS``, in the backward only); the backward recomputes ``r`` from ``x``, as fused
    kernels do to save memory."""

    def forward(x, w):
        return rms_norm_forward(x, w, eps)

    def fwd(x, w):
        return forward(x, w), (x, w)

    def bwd(saved, g):
        x, w = saved
        mean_sq = jnp.mean(x * x, axis=-1, keepdims=True)
        r = 1 / (jnp.sqrt(mean_sq) + eps) if bug == "eps_outside_sqrt" else jax.lax.rsqrt(mean_sq + eps)
        x_hat, g_hat = x * r, g * w
        axis = -2 if bug == "wrong_axis" else -1
        term = x_hat * jnp.mean(g_hat * x_hat, axis=axis, keepdims=True)
        if bug == "missing_term":
            term = jnp.zeros_like(term)
        dx = r * (g_hat + term) if bug == "wrong_sign" else r * (g_hat - term)
        dw = (g * (x if bug == "weight_grad" else x_hat)).reshape(-1, x.shape[-1]).sum(0)
        return dx, dw

    op = jax.custom_vjp(forward)
    op.defvjp(fwd, bwd)
    return op


class FusedRMSNorm(nn.Module):
    epsilon: float
    bug: str = ""

    @nn.compact
    def __call__(self, x):
        scale = self.param("scale", nn.initializers.ones, (x.shape[-1],))
        return rms_norm(self.epsilon, self.bug)(x, scale)


class FlaxNet(nn.Module):
    """``fc1`` -> ``norm`` (the custom VJP) -> exact GELU -> ``fc2``."""

    hidden: int
    d_out: int
    epsilon: float
    bug: str = ""

    @nn.compact
    def __call__(self, x):
        h = FusedRMSNorm(self.epsilon, self.bug, name="norm")(nn.Dense(self.hidden, name="fc1")(x))
        return nn.Dense(self.d_out, name="fc2")(nn.gelu(h, approximate=False))
