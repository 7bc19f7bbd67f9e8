"""Backends with planted bugs, for the guides' examples (they need NumPy only, not pytest).

From the repository root (so that ``examples`` is importable)::

    crosscheck explain --backend examples.planted_bugs:BackwardBugAtLayer5 --dim 8 --seed 4
    crosscheck sweep --backend examples.planted_bugs:by_dim --layers 2 --batch 2 \\
        --dim 2 --dim 3 --dim 4 --dim 5 --dtype float64 --timeout 3
"""

from __future__ import annotations

import os
import threading

import numpy as np


def correct(weights: np.ndarray, x: np.ndarray) -> np.ndarray:
    """The stack's gradient by hand: forward keeping the activations, then backward."""
    ys, y = [x], x
    for w in weights:
        y = np.maximum(y @ w, 0)
        ys.append(y)
    g, out = 2 * y, np.empty_like(weights)
    for k in reversed(range(len(weights))):
        delta = g * (ys[k + 1] > 0)
        out[k] = ys[k].T @ delta
        g = delta @ weights[k].T
    return out


def _forward(weights: np.ndarray, x: np.ndarray) -> np.ndarray:
    ys, y = [], x
    for w in weights:
        y = np.maximum(y @ w, 0).astype(x.dtype)
        ys.append(y)
    return np.stack(ys)


class BackwardBugAtLayer5:
    """Right forward pass; the backward pass drops the ReLU mask of layer 5 (derivative 1 everywhere)."""

    name = "backward-bug"

    def grad(self, weights: np.ndarray, x: np.ndarray) -> np.ndarray:
        ys, masks, y = [x], [], x
        for w in weights:
            z = y @ w
            masks.append(z > 0)
            y = np.maximum(z, 0)
            ys.append(y)
        g, out = 2 * y, np.empty_like(weights)
        for k in reversed(range(len(weights))):
            delta = g if k == 5 else g * masks[k]
            out[k] = ys[k].T @ delta
            g = delta @ weights[k].T
        return out

    def activations(self, weights: np.ndarray, x: np.ndarray) -> np.ndarray:
        """The forward outputs ``y[1] .. y[L]``, for ``crosscheck explain``."""
        return _forward(weights, x)


def by_dim(weights: np.ndarray, x: np.ndarray) -> np.ndarray:
    """A backend whose behaviour depends on the width d: correct at d = 2; kills its process at d = 3
    (``os._exit``, as a segfault would); a mean instead of a sum at d = 4; hangs for 30 s at d = 5."""
    d = weights.shape[1]
    if d == 3:
        os._exit(3)
    if d == 4:
        return correct(weights, x) / np.asarray(x.size, dtype=x.dtype)
    if d == 5:
        threading.Event().wait(30)
    return correct(weights, x)
