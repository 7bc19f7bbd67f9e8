"""A JAX backend that says, in its gradient, the JAX settings in effect inside its call.

``jax_settings_grad(weights, x)`` is ``precision + 10 * on_cpu_by_choice`` everywhere: ``precision`` is
0 for JAX's default (unset), 1 for ``high``, 2 for ``highest``; ``on_cpu_by_choice`` is 1 when a default
device is set (``jax.default_device``) and the array it makes is on a CPU device. A CPU-only machine
puts every array on the CPU anyway: what the code tells apart there is whether the choice was made.
"""

from __future__ import annotations

import numpy as np

PRECISIONS = {None: 0, "high": 1, "highest": 2}


def code(platform: str, precision: str) -> int:
    """What ``jax_settings_grad`` returns when ``platform`` and ``precision`` are in effect."""
    return {"default": 0, "high": 1, "highest": 2}[precision] + 10 * (platform == "cpu")


def jax_settings_grad(weights: np.ndarray, x: np.ndarray) -> np.ndarray:
    import jax
    import jax.numpy as jnp

    array = jnp.asarray(weights)
    platform = next(iter(array.devices())).platform
    chosen = jax.config.jax_default_device is not None and platform == "cpu"
    value = PRECISIONS[jax.config.jax_default_matmul_precision] + 10 * chosen
    return np.full(weights.shape, value, dtype=weights.dtype)
