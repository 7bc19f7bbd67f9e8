"""Losses for checking gradients: ``projection_loss``, a fixed random projection of a model's outputs,
and ``outputs_loss``, the same over every floating-point array of a model's output pytree (a port's
default loss: a pooler output counts as much as the last hidden state).

A gradient check needs a loss whose gradient is not at rounding level. ``sum(outputs ** 2)`` is a
common choice and a trap: after a LayerNorm (or any normalization) it is a constant, so every gradient
is rounding noise and any bug passes. ``sum(R * outputs)`` with a fixed random ``R`` is linear in the
outputs, so its gradient is ``J^T R`` (a random vector-Jacobian product: every output direction is
weighed), and it is flat only where the outputs themselves do not depend on the parameters.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np

from crosscheck._backends import DECLARED
from crosscheck._types import FrameworkArray


@functools.lru_cache(maxsize=32)
def projection(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """The fixed ``R`` of ``projection_loss``: standard normal values rounded to float32 (so that a
    float32 and a float64 evaluation use the same ``R``), as a read-only float64 array."""
    values = np.random.default_rng(seed).standard_normal(shape).astype(np.float32).astype(np.float64)
    values.flags.writeable = False
    return values


def projection_loss(outputs: FrameworkArray, *, seed: int = 0) -> FrameworkArray:
    """``sum(R * outputs)`` with ``R`` a fixed random array of the outputs' shape (``projection``).

    Works on NumPy arrays (returns a float), PyTorch tensors and JAX arrays (returns a 0-d array of
    theirs, differentiable), in the outputs' dtype.

    Example:
        >>> outputs = np.ones((2, 3))
        >>> crosscheck.projection_loss(outputs) == crosscheck.projection_loss(outputs)  # fixed R
        True
        >>> def torch_loss(params, inputs):  # doctest: +SKIP
        ...     return crosscheck.projection_loss(model(params, inputs["x"]))
    """
    return dot(outputs, projection(tuple(int(d) for d in np.shape(outputs)), int(seed)))


def dot(outputs: FrameworkArray, r: np.ndarray) -> FrameworkArray:
    """``sum(r * outputs)`` for a NumPy ``r`` of the outputs' shape: a float for NumPy outputs, a 0-d
    array of the outputs' framework and dtype (differentiable) for PyTorch tensors and JAX arrays (a
    blockwise check's cotangent, ``projection_loss``'s ``R``)."""
    module = type(outputs).__module__.split(".", 1)[0]
    for framework in DECLARED:
        if module in framework.modules:  # its folder's arrays.py: the sum in its own arrays
            return framework.module("arrays").projection_loss(outputs, r)
    return float(np.sum(np.asarray(outputs, dtype=np.float64) * r))


def floating_outputs(output: Any) -> list[FrameworkArray]:
    """Every floating-point array of a model's output, depth first: a Hugging Face ``ModelOutput``'s
    fields (PyTorch's and Flax's, in field order, ``None`` left out), a dict's values, a tuple's or a
    list's items; integer and boolean arrays (token ids, masks) are left out."""
    if hasattr(output, "to_tuple"):
        output = output.to_tuple()
    if isinstance(output, dict) or (hasattr(output, "values") and hasattr(output, "keys")):
        output = list(output.values())
    if isinstance(output, (tuple, list)):
        return [a for item in output for a in floating_outputs(item)]
    if hasattr(output, "shape") and "float" in str(getattr(output, "dtype", "")):
        return [output]
    return []


def outputs_loss(output: Any, *, seed: int = 0, layouts: Sequence[Any] = ()) -> FrameworkArray:
    """``sum_i sum(R_i * a_i)`` over every floating-point array ``a_i`` of ``output``
    (``floating_outputs``), ``R_i`` the fixed random array of ``projection_loss`` with seed ``seed + i``:
    both sides of a port pair their arrays by position (and shape), so every output reaches the loss.

    ``layouts``: per array (None: as it is), where it holds the original's values in another layout
    (a port's NHWC image against PyTorch's NCHW), what reads it in the original's: an object with
    ``shape`` (the original's) and ``to_jax(r)`` (an array in the original's layout in this one's). ``R_i``
    is drawn in the original's shape and projected onto this one's layout, so that both sides compute
    one loss: ``sum(R * original) == sum(to_jax(R) * port)``.

    Raises:
        ValueError: the output holds no floating-point array.
    """
    arrays = floating_outputs(output)
    if not arrays:
        raise ValueError(
            f"the model's output holds no floating-point array (found {type(output).__name__}): "
            "pass `output=` (which array to check) or `loss=`"
        )
    total = None
    for i, array in enumerate(arrays):
        layout = layouts[i] if i < len(layouts) else None
        if layout is None:
            term = projection_loss(array, seed=seed + i)
        else:
            term = dot(array, layout.to_jax(projection(tuple(layout.shape), seed + i)))
        total = term if total is None else total + term
    return total
