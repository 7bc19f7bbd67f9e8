"""A tiny tanh MLP, ``sum((tanh(x @ w1 + b1) @ w2) ** 2)``: its parameter shapes, its NumPy reference and
its JAX side, shared by the tolerance tests (``test_own_tolerance``, ``test_mixed_precision_workloads``),
whose PyTorch sides plant their own errors."""

from __future__ import annotations

import numpy as np

SHAPES = {"w1": (4, 6), "b1": (6,), "w2": (6, 3)}


def numpy_loss(p, i):
    h = np.tanh(i["x"] @ p["w1"] + p["b1"])
    return float(np.sum((h @ p["w2"]) ** 2))


def jax_loss(p, i):
    import jax.numpy as jnp

    h = jnp.tanh(i["x"] @ p["w1"] + p["b1"])
    return jnp.sum((h @ p["w2"]) ** 2)
