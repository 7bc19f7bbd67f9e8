"""Planted backends that claim a structure they do not have: ``crosscheck inspect`` must flag each.

Their gradients are correct; only the structure differs from the claim, which numbers cannot show.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np


class UnrolledJax:
    """Claims a checkpointed scan; runs a Python loop (each layer checkpointed, but no scan)."""

    name = "unrolled-jax"
    claims: ClassVar[dict] = {"scan": True, "checkpoint": "layer"}

    def loss_fn(self):
        import jax
        import jax.numpy as jnp

        def loss(weights, x):
            y = x
            for k in range(weights.shape[0]):
                y = jax.checkpoint(lambda y, w: jax.nn.relu(y @ w))(y, weights[k])
            return jnp.sum(y**2)

        return loss

    def grad(self, weights, x):
        import jax

        return np.asarray(jax.grad(self.loss_fn())(weights, x))


class ScanWithoutCheckpoint(UnrolledJax):
    """Claims a per-layer checkpoint; runs the scan without ``jax.checkpoint``."""

    name = "scan-without-checkpoint"

    def loss_fn(self):
        import jax
        import jax.numpy as jnp

        def loss(weights, x):
            final, _ = jax.lax.scan(lambda y, w: (jax.nn.relu(y @ w), None), x, weights)
            return jnp.sum(final**2)

        return loss


class TorchLoopWithoutCheckpoint:
    """Claims a per-layer checkpoint; runs a plain PyTorch loop."""

    name = "torch-loop-without-checkpoint"
    claims: ClassVar[dict] = {"framework": "torch", "checkpoint": "layer"}

    def grad(self, weights, x):
        import torch

        w = torch.tensor(weights, requires_grad=True)
        y = torch.tensor(x)
        for k in range(w.shape[0]):
            y = torch.relu(y @ w[k])
        torch.sum(y**2).backward()
        return w.grad.numpy()


class InspectedIsNotRun(UnrolledJax):
    """Shows a checkpointed scan in ``loss_fn()`` but computes its gradient some other way."""

    name = "inspected-is-not-run"

    def loss_fn(self):
        import jax
        import jax.numpy as jnp

        def loss(weights, x):
            body = jax.checkpoint(lambda y, w: (jax.nn.relu(y @ w), None))
            return jnp.sum(jax.lax.scan(body, x, weights)[0] ** 2)

        return loss

    def grad(self, weights, x):
        return np.asarray(super().grad(weights, x)) + 1  # not the gradient of the loss shown
