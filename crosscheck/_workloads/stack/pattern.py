"""The stack on a candidate's own ReLU pattern: read from its activations, checked against float64's,
and the exact float64 change of the gradient from float64's pattern to it.

On a fixed activation pattern the stack is a product of matrices (masks held), so the gradient there is
linear algebra with no kink left: the difference between the gradient on the candidate's pattern and on
float64's is computed here in float64, row by row of the batch (a flip in row ``n`` changes that row's
forward and backward pass only), and added to the oracle's answer. The oracle's values still come from
evaluating the loss alone; this is the exact move of a piecewise linear function from one piece to its
neighbour, with a bound on its own rounding.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import numpy as np

from crosscheck._compare.constants import UNIT_ROUNDOFF
from crosscheck._workloads.stack.forward import Forward, backward, forward


@dataclasses.dataclass(frozen=True)
class Pattern:
    """A candidate's ReLU pattern and the float64 stack held at it.

    Attributes:
        fwd: the float64 forward pass with the ReLUs held at the candidate's masks.
        deltas: its ``dloss/dz`` (L arrays ``(N, d)``).
        base: the float64 forward pass (its own pattern) and its deltas.
        flipped: ``(K, 3)`` the units ``(layer, row, unit)`` whose ReLU differs from float64's.
    """

    fwd: Forward
    deltas: list[np.ndarray]
    base: tuple[Forward, list[np.ndarray]]
    flipped: np.ndarray

    @property
    def rows(self) -> np.ndarray:
        """The batch rows with a flip: the only rows whose passes differ from float64's."""
        return np.unique(self.flipped[:, 1])

    def change(self, layer: int) -> tuple[np.ndarray, np.ndarray]:
        """The gradient of ``layer`` on this pattern less float64's, ``(d, d)``, and a bound on the
        rounding of that difference (``_change_bound``)."""
        rows, (fwd, deltas) = self.rows, self.base
        if not len(rows):
            zero = np.zeros(fwd.weights.shape[1:])
            return zero, zero
        left = np.concatenate([self.fwd.ys[layer][rows], -fwd.ys[layer][rows]])
        right = np.concatenate([self.deltas[layer][rows], deltas[layer][rows]])
        return left.T @ right, self._change_bound(layer, rows)

    def _change_bound(self, layer: int, rows: np.ndarray) -> np.ndarray:
        """What float64 rounding can move ``change(layer)`` by: both passes of ``rows`` run again on
        ``|W|`` and ``|x|`` (the masks held), so every product's terms are summed in magnitude, and
        each of the ``2 L + 1`` products a path takes adds at most ``d u`` of them (a first-order
        worst case, with a factor 2 to spare: no model, no sampling)."""
        n_layers, d = self.fwd.weights.shape[:2]
        gamma = 2.0 * (2 * n_layers + 1) * d * UNIT_ROUNDOFF["float64"]
        return gamma * sum(ys[layer].T @ deltas[layer] for ys, deltas in self._magnitudes)

    @functools.cached_property
    def _magnitudes(self) -> list[tuple[list[np.ndarray], list[np.ndarray]]]:
        """For this pattern and float64's, the passes of the flipped rows on ``|x|`` and ``|W|``
        (``|W|`` made a ``(d, d)`` layer at a time, never for the whole stack)."""
        rows, weights = self.rows, self.fwd.weights
        found = []
        for masks in (self.fwd.masks, self.base[0].masks):
            held = [mask[rows] for mask in masks]
            ys = [np.abs(self.fwd.ys[0][rows])]
            for m in range(len(weights)):
                ys.append((ys[-1] @ np.abs(weights[m])) * held[m])
            g, deltas = 2.0 * ys[-1], [np.empty(0)] * len(weights)
            for m in reversed(range(len(weights))):
                deltas[m] = g * held[m]
                g = deltas[m] @ np.abs(weights[m]).T
            found.append((ys, deltas))
        return found


def masks_of(activations: Any, fwd: Forward) -> list[np.ndarray] | str:
    """The ReLU pattern a candidate's activations ``y[1] .. y[L]`` show (a unit is on where its
    activation is positive), or why they cannot say."""
    values = np.asarray(activations)
    expected = (len(fwd.zs), *fwd.zs[0].shape)
    if values.shape != expected:
        return f"its activations have shape {values.shape}, expected {expected}"
    if not np.all(np.isfinite(values.astype(np.float64))):
        return "its activations are not all finite"
    return [values[m] > 0 for m in range(len(values))]


def held(fwd: Forward, deltas: list[np.ndarray], masks: list[np.ndarray]) -> Pattern:
    """The float64 stack held at ``masks`` (from ``fwd``'s weights and inputs, no copy of them)."""
    on = forward(fwd.weights, fwd.ys[0], masks)
    flipped = [
        np.column_stack([np.full(len(rows), m), rows, units])
        for m, (mine, theirs) in enumerate(zip(masks, fwd.masks, strict=True))
        for rows, units in [np.nonzero(mine != theirs)]
    ]
    found = np.concatenate(flipped).astype(np.int64) if flipped else np.zeros((0, 3), np.int64)
    return Pattern(on, backward(on, grads=False)[0], (fwd, deltas), found)


def beyond(pattern: Pattern, bounds: list[np.ndarray]) -> np.ndarray:
    """``(K, 3)`` units whose ReLU disagrees with the sign of their float64 pre-activation on the
    pattern by more than ``bounds`` (L arrays ``(N, d)``): a pattern rounding cannot explain.

    A unit on where its pre-activation is negative, or off where it is positive, is explained when
    ``|z| <= bound``. An exact zero computed exactly (bound 0) must be off, as ``jax.nn.relu``.
    """
    found = []
    for m, (z, mask, bound) in enumerate(zip(pattern.fwd.zs, pattern.fwd.masks, bounds, strict=True)):
        disagree = mask != (z > 0)
        rows, units = np.nonzero(disagree & ~((np.abs(z) <= bound) & (bound > 0)))
        found.append(np.column_stack([np.full(len(rows), m), rows, units]))
    return np.concatenate(found).astype(np.int64)
