"""The stack's ReLU kinks: which pre-activations a computation's rounding may flip, and what each flip
can do to the gradient."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from crosscheck._workloads.stack.forward import Forward


@dataclasses.dataclass(frozen=True)
class KinkEffects:
    """What a ReLU sign flip at an ambiguous pre-activation can do to each gradient entry.

    Attributes:
        kinks: ``(K, 3)`` integer array of ambiguous pre-activations ``(layer, row, unit)``.
        count: ``(L, d, d)``: how many kinks can move the entry by more than the threshold.
        alternative: ``(L, d, d)``: the signed change of the entry if its strongest kink flips.
        culprit: ``(L, d, d)``: index into ``kinks`` of the entry's strongest kink (-1: none).
        minor: ``(L, d, d)``: the summed size of the changes below the threshold.
    """

    kinks: np.ndarray
    count: np.ndarray
    alternative: np.ndarray
    culprit: np.ndarray
    minor: np.ndarray


def ambiguous_kinks(fwd: Forward, bounds: list[np.ndarray]) -> np.ndarray:
    """Pre-activations whose sign a computation with error ``bounds`` may get wrong.

    An exact zero computed exactly (bound 0) is not ambiguous: the convention, derivative 0, applies.
    """
    found = [
        np.column_stack([np.full(len(rows), m), rows, units])
        for m, (z, b) in enumerate(zip(fwd.zs, bounds, strict=True))
        for rows, units in [np.nonzero((b > 0) & (np.abs(z) <= b))]
    ]
    return np.concatenate(found).astype(np.int64) if found else np.zeros((0, 3), np.int64)


def kink_effects(
    fwd: Forward,
    deltas: list[np.ndarray],
    kinks: np.ndarray,
    threshold: np.ndarray,
    bounds: list[np.ndarray] | None = None,
    *,
    last_layer_forward: bool = False,
    fraction: float = 1.0,
) -> KinkEffects:
    """For each kink, the signed change of every gradient entry if that kink's ReLU flips.

    Flipping unit ``(m, n, u)`` switches ``dloss/dz[m][n, u]`` between 0 and the upstream gradient
    ``g``: column ``u`` of ``dloss/dW[m]`` moves by ``y[m][n, :] * g``, and the change travels back
    through row ``n`` of every earlier layer. Changes larger than ``threshold`` are counted (one such
    kink per entry can be judged on both sides; more cannot), smaller ones are summed into ``minor``.
    Its forward effect, a change of at most ``bounds[m][n, u]`` in ``y[m + 1][n, u]``, is bounded
    separately (``_forward_effect``): usually rounding-sized, it is all there is in a row whose output
    is zero in float64, and an entry it can move beyond ``threshold`` is not judged. With
    ``last_layer_forward`` (a 16-bit dtype) a row with a flip in the last layer is bounded too: there the
    forward change is the upstream gradient itself (``2 * y``), at entries whose float64 value and
    modelled rounding are 0, and 16 bits make it far larger than float32's floor, which covers it.
    The threshold is ``fraction * threshold``, taken a ``(d, d)`` layer at a time (never a second
    array of the gradient's size).
    """
    shape = fwd.weights.shape
    limit = _Threshold(np.broadcast_to(threshold, shape), fraction)
    count = np.zeros(shape, np.int32)  # int32: half an (L, d, d) float64 array each, not one
    # The strongest change so far is |alternative| (``best``, taken a layer at a time: abs is exact).
    alternative, minor = np.zeros(shape), np.zeros(shape)
    culprit = np.full(shape, -1, dtype=np.int32)
    for index, (m, n, unit) in enumerate(kinks):
        on = fwd.masks[m][n, unit]
        upstream = deltas[m][n, unit] if on else _upstream(fwd, deltas, m, n, unit)
        change = np.zeros(shape[1])
        change[unit] = -upstream if on else upstream
        # Layers after m are not moved (their entries change by 0): only layers m, m - 1, ..., 0 are
        # visited, each a (d, d) layer at a time (the whole (L, d, d) array per kink cost K * L * d**2
        # a pass, most of a --dim 2048 run's judging).
        for k in range(m, -1, -1):
            if k < m:
                change = (change @ fwd.weights[k + 1].T) * fwd.masks[k][n]
            moved = np.outer(fwd.ys[k][n], change)
            size = np.abs(moved)
            large = size > limit.layer(k)
            count[k] += large
            np.add(minor[k], size, out=minor[k], where=~large)
            stronger = large & (size > np.abs(alternative[k]))
            culprit[k][stronger] = index
            alternative[k][stronger] = moved[stronger]
    if bounds is not None:
        rows = [int(n) for n in np.unique(kinks[:, 1])]
        _rows_bound(fwd, deltas, kinks, bounds, rows, limit, (count, culprit, minor), last_layer_forward)
    return KinkEffects(kinks, count, alternative, culprit, minor)


def _rows_bound(fwd, deltas, kinks, bounds, rows, threshold: _Threshold, found, last=False) -> None:
    """Bound what every possible flip in each row of ``rows`` can do together, forward and backward.

    A flip changes ``y`` by at most its pre-activation's size plus its error; that change travels forward
    (through ``|W|``) and may flip further units whose pre-activations are smaller than it. With every
    unit that may flip held open, the row's contribution to each gradient entry can move by at most
    about ``(|y| + dy) * (|delta| + d_delta) - |y| * |delta|``. Flips at two or more layers interact (one
    opens the path another's change takes), so such a row's entries beyond ``threshold`` are
    unjudgeable. In a row whose output is zero in float64, a flip's forward change is all the signal
    there is: that part is bounded too, added to ``minor`` or, beyond ``threshold``, made unjudgeable.
    The bounds propagate absolute values, so they are safe and loose; they apply only to such rows.
    ``found``: ``(count, culprit, minor)``, updated in place. The rows are taken together a layer at a
    time, each row's products as its own (the same sums as one row at a time): ``|W|`` is made a
    ``(d, d)`` layer at a time, never for the whole stack.
    """
    count, culprit, minor = found
    n_layers, d = fwd.weights.shape[:2]
    states = []
    for n in rows:
        in_row = np.flatnonzero(kinks[:, 1] == n)
        may_flip = np.zeros((n_layers, d), bool)
        may_flip[kinks[in_row, 0], kinks[in_row, 2]] = True
        dy = [np.zeros(d) for _ in range(n_layers + 1)]  # bound of the change of y[k][n]
        states.append((n, in_row, may_flip, dy))
    for k in range(n_layers):
        weight = np.abs(fwd.weights[k])
        for n, _, may_flip, dy in states:
            z, dz = np.abs(fwd.zs[k][n]), dy[k] @ weight
            may_flip[k] |= (dz > 0) & (z <= dz + bounds[k][n])
            dy[k + 1] = np.where(may_flip[k], z + dz + bounds[k][n], np.where(fwd.masks[k][n], dz, 0.0))
    live = []
    for n, in_row, may_flip, dy in states:
        interacting = len(np.unique(np.nonzero(may_flip)[0])) > 1
        if not interacting and np.any(fwd.ys[-1][n]) and not (last and may_flip[-1].any()):
            # One layer of flips in a live row: each flip's effect is judged on its own (kink_effects);
            # its forward part is a change of rounding size in a row whose output is far from it.
            continue
        open_ = [fwd.masks[k][n] | may_flip[k] for k in range(n_layers)]
        top = int(np.nonzero(may_flip)[0].max())
        carried = [2.0 * np.abs(fwd.ys[-1][n]), 2.0 * dy[n_layers]]  # g, d_g
        live.append((n, in_row, dy, open_, interacting, top, carried))
    for k in reversed(range(n_layers)) if live else ():
        weight = np.abs(fwd.weights[k])
        for n, in_row, dy, open_, interacting, top, carried in live:
            g, d_g = carried
            y, delta = np.abs(fwd.ys[k][n]), np.abs(deltas[k][n])
            if interacting and k <= top:
                # Every path may be open: the whole contribution of the row is uncertain.
                d_delta = (g + d_g) * open_[k]
                bound = np.outer(y + dy[k], d_delta) + np.outer(y, delta)
            else:
                d_delta = d_g * open_[k]
                bound = np.outer(y + dy[k], d_delta) + np.outer(dy[k], delta)
            beyond = bound > threshold.layer(k)
            count[k][beyond] = np.maximum(count[k][beyond], 2)
            culprit[k][beyond & (culprit[k] < 0)] = in_row[0]
            minor[k] += np.where(beyond, 0.0, bound)
            carried[:] = (g * open_[k]) @ weight.T, d_delta @ weight.T


class _Threshold:
    """``fraction * threshold``, a layer at a time: the last layer asked for is kept (a kink's change
    visits layers m, m - 1, ..., 0, and the next kink starts again at its own m)."""

    def __init__(self, threshold: np.ndarray, fraction: float) -> None:
        self.threshold, self.fraction = threshold, fraction
        self._layer, self._value = -1, np.empty(0)

    def layer(self, k: int) -> np.ndarray:
        if k != self._layer:
            self._layer, self._value = k, self.fraction * self.threshold[k]
        return self._value


def _upstream(fwd: Forward, deltas: list[np.ndarray], m: int, n: int, unit: int) -> float:
    """``dloss/dy[m + 1][n, unit]`` for a unit that is off (its delta is 0, so recompute it)."""
    if m + 1 == len(fwd.zs):
        return 2.0 * float(fwd.ys[-1][n, unit])
    return float(deltas[m + 1][n] @ fwd.weights[m + 1][unit])
