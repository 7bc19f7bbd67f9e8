"""The screens' random +-1 directions (drawn once, from a fixed seed) and a gradient projected along
them: the gradient's screen and the HVP's share them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

#: How the screening directions are drawn (a note of the report says so).
DIRECTIONS_GENERATOR = "numpy.random.default_rng(0).integers(0, 2, (L, S, d, d), dtype=int8) * 2 - 1"


def sign_directions(layers: int, count: int, dim: int, dtype: Any = np.float64) -> np.ndarray:
    """``count`` random +-1 directions per layer, ``(layers, count, dim, dim)`` of ``dtype``.

    The seed is fixed: the same case is screened along the same directions. Drawn as int8 (a fraction
    of the cost of drawing float64 values at d = 1024). The gradient's screening keeps them as int8
    (``SIGNS``): one byte an entry instead of eight (4 GiB less at d = 4096), every product with them
    taken in float64 a layer at a time (``project``), so the sums are the same.
    """
    signs = np.random.default_rng(0).integers(0, 2, size=(layers, count, dim, dim), dtype=np.int8)
    directions = np.multiply(signs, 2, dtype=dtype)
    directions -= 1
    return directions


#: What the gradient's screening directions are stored as: their entries are -1, 0 or +1.
SIGNS = np.int8


def project(values: np.ndarray, directions: np.ndarray) -> np.ndarray:
    """``sum(values[k] * directions[k, s])`` as ``(L, S)`` float64, a layer at a time (``directions``
    of any dtype, converted to float64 one layer at a time: never a float64 copy of them all)."""
    out = np.empty(directions.shape[:2])
    for k in range(len(directions)):
        layer = directions[k].reshape(directions.shape[1], -1).astype(np.float64)
        out[k] = layer @ np.asarray(values[k], np.float64).ravel()
    return out
