"""Losses for checking gradients: ``projection_loss``, a fixed random projection of a model's outputs.

A gradient check needs a loss whose gradient is not at rounding level. ``sum(outputs ** 2)`` is a
common choice and a trap: after a LayerNorm (or any normalization) it is a constant, so every gradient
is rounding noise and any bug passes. ``sum(R * outputs)`` with a fixed random ``R`` is linear in the
outputs, so its gradient is ``J^T R`` (a random vector-Jacobian product: every output direction is
weighed), and it is flat only where the outputs themselves do not depend on the parameters.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from crosscheck._backends import DECLARED


@functools.lru_cache(maxsize=32)
def projection(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """The fixed ``R`` of ``projection_loss``: standard normal values rounded to float32 (so that a
    float32 and a float64 evaluation use the same ``R``), as a read-only float64 array."""
    values = np.random.default_rng(seed).standard_normal(shape).astype(np.float32).astype(np.float64)
    values.flags.writeable = False
    return values


def projection_loss(outputs: Any, *, seed: int = 0) -> Any:
    """``sum(R * outputs)`` with ``R`` a fixed random array of the outputs' shape (``projection``).

    Works on NumPy arrays (returns a float), PyTorch tensors and JAX arrays (returns a 0-d array of
    theirs, differentiable), in the outputs' dtype.

    Example:
        >>> def torch_loss(params, inputs):  # doctest: +SKIP
        ...     return crosscheck.projection_loss(model(params, inputs["x"]))
    """
    r = projection(tuple(int(d) for d in np.shape(outputs)), int(seed))
    module = type(outputs).__module__.split(".", 1)[0]
    for framework in DECLARED:
        if module in framework.modules:  # its folder's arrays.py: the sum in its own arrays
            return framework.module("arrays").projection_loss(outputs, r)
    return float(np.sum(np.asarray(outputs, dtype=np.float64) * r))
