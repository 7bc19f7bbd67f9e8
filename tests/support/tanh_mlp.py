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


def float32_steps_port(*, error: float = 0.0, float32_only: float = 0.0):
    """A port of a two-layer tanh MLP (PyTorch ``Linear``s, Flax linen ``Dense``s) whose float64 losses
    both keep a float32 step (the hidden layer rounded to float32, as Hugging Face's upcasts do); the JAX
    side scales its hidden layer by ``1 + error`` in every precision (a real porting error) and by
    ``1 + float32_only`` in float32 alone (noise its own float32 re-run measures as rounding)."""
    import flax.linen as nn
    import jax.numpy as jnp
    import torch

    import crosscheck

    class TorchMLP(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc1, self.fc2 = torch.nn.Linear(4, 6), torch.nn.Linear(6, 3)

        def forward(self, x):
            h = torch.tanh(self.fc1(x))
            return self.fc2(h.float().double() if h.dtype == torch.float64 else h)

    class FlaxMLP(nn.Module):
        @nn.compact
        def __call__(self, x):
            h = jnp.tanh(nn.Dense(6, name="fc1")(x))
            single = h.dtype == jnp.float32
            h = h * (1 + float32_only) if single else h.astype(jnp.float32).astype(jnp.float64)
            return nn.Dense(3, name="fc2")(h * (1 + error))

    torch.manual_seed(0)
    inputs = {"x": np.random.default_rng(0).standard_normal((16, 4))}
    return crosscheck.Port(name="mlp", torch=TorchMLP().eval(), jax=FlaxMLP(), inputs=inputs)
