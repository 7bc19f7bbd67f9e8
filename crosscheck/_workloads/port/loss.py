"""The default loss of a port: a fixed random projection of the model's output, ``sum(R * output)``.

A gradient check needs a loss whose gradient is not at rounding level: ``sum(output ** 2)`` after a
LayerNorm is nearly constant, and then every bug passes. ``R`` is standard normal, drawn with
``SEED`` for the output's shape and rounded to float32 (a float32 and a float64 run use the same
``R``), so its gradient is a random vector-Jacobian product that weighs every output entry. The
model-oracle work (``crosscheck.projection_loss``) defines the same loss; this one is kept small so
that the port can take that one when it lands.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

#: The projection's seed (recorded in the port's case).
SEED = 0


@functools.lru_cache(maxsize=32)
def projection(shape: tuple[int, ...], seed: int = SEED) -> np.ndarray:
    values = np.random.default_rng(seed).standard_normal(shape).astype(np.float32).astype(np.float64)
    values.flags.writeable = False
    return values


def projection_loss(output: Any) -> Any:
    """``sum(R * output)`` in the output's framework and dtype (a PyTorch tensor or a JAX array)."""
    r = projection(tuple(int(d) for d in np.shape(output)))
    if type(output).__module__.split(".", 1)[0] == "torch":
        import torch

        return torch.sum(output * torch.tensor(r, dtype=output.dtype, device=output.device))
    import jax.numpy as jnp

    return jnp.sum(output * jnp.asarray(r, dtype=output.dtype))
