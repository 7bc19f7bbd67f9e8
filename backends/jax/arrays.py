"""JAX arrays where crosscheck meets them: a backend's result, and ``projection_loss``'s outputs."""

from __future__ import annotations

from typing import Any

import numpy as np


def to_numpy(value: Any) -> tuple[Any, str | None]:
    """``(value, note)``: a JAX array converts with ``np.asarray`` as it is, so it is left as it is."""
    return value, None


def projection_loss(outputs: Any, r: np.ndarray) -> Any:
    """``sum(r * outputs)`` as a 0-d JAX array of the outputs' dtype (differentiable)."""
    import jax.numpy as jnp

    return jnp.sum(outputs * jnp.asarray(r, dtype=outputs.dtype))
