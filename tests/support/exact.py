"""The exact gradient of the ReLU stack in rational arithmetic (``fractions.Fraction``).

Every float is turned into its exact value, so this reference has no rounding error at all; ReLU's
derivative at an exact zero is 0, as ``jax.nn.relu``.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np


def exact_gradient(weights: np.ndarray, x: np.ndarray, held: list | None = None) -> list:
    """Return ``dloss/dweights`` as nested lists of Fractions, shape ``(L, d, d)``; with ``held`` (L
    arrays ``(N, d)`` of bool) on that ReLU pattern, held whatever the signs (the stack's piece)."""
    w = [[[Fraction(float(v)) for v in row] for row in layer] for layer in weights]
    y = [[Fraction(float(v)) for v in row] for row in x]
    d = len(y[0])
    ys, masks = [y], []
    for m, layer in enumerate(w):
        z = [[sum((row[i] * layer[i][j] for i in range(d)), Fraction(0)) for j in range(d)] for row in y]
        mask = [[v > 0 for v in row] for row in z] if held is None else [list(r) for r in held[m]]
        y = [
            [v if m else Fraction(0) for v, m in zip(zr, mr, strict=True)]
            for zr, mr in zip(z, mask, strict=True)
        ]
        ys.append(y)
        masks.append(mask)
    g = [[2 * v for v in row] for row in y]
    grads = [None] * len(w)
    for k in reversed(range(len(w))):
        delta = [
            [gv if m else Fraction(0) for gv, m in zip(gr, mr, strict=True)]
            for gr, mr in zip(g, masks[k], strict=True)
        ]
        grads[k] = [
            [sum((ys[k][n][i] * delta[n][j] for n in range(len(delta))), Fraction(0)) for j in range(d)]
            for i in range(d)
        ]
        g = [
            [sum((delta[n][j] * w[k][i][j] for j in range(d)), Fraction(0)) for i in range(d)]
            for n in range(len(delta))
        ]
    return grads


def as_float(grads: list) -> np.ndarray:
    return np.array([[[float(v) for v in row] for row in layer] for layer in grads])
