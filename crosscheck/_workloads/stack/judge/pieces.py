"""Which ReLU piece a failing candidate's gradient took (``named``), where it shows its activations.

A float32 candidate that shows its activations is judged on the piece they show (``pattern``). When it
fails there, one cause is common and easy to miss in a count of mismatched entries: its forward and its
backward took different pieces (a gradient computed on float64's pattern, or a mask of its own in the
backward pass, another derivative at an exact zero). Two readings are tried, and one is said only where
the candidate's every entry agrees with the oracle's answer moved to that piece, judged as the
comparison judges it (``compare_full``):

1. float64's pattern, where its activations show another (units within rounding of zero);
2. the pattern its activations show with some units taken otherwise in the backward pass. Layer
   ``k``'s gradient is ``y[k].T @ delta[k]``, so with ``y[k]`` known (the held forward pass) and the
   batch no wider than the layer, the ``delta[k]`` a gradient implies is a least-squares solution; from
   the last layer down, a unit whose implied ``delta`` is about 0 where the pattern has it on, or about
   ``dloss/dy`` where it has it off, is taken otherwise, and the layers below are read with it.

Neither reading agreeing, nothing is said: the disagreement is another bug, and its message says what
the comparison found.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from crosscheck._compare.record import Comparison
from crosscheck._workloads.protocol import Options
from crosscheck._workloads.stack.forward import backward
from crosscheck._workloads.stack.judge.answers import GradAnswer
from crosscheck._workloads.stack.judge.full import compare_full
from crosscheck._workloads.stack.judge.passes import Passes
from crosscheck._workloads.stack.pattern import Pattern

#: How near the implied ``delta`` of a unit must come to what taking it otherwise gives (a fraction of
#: that value) for the unit to be read as taken otherwise.
NEAR = 0.25
#: How many robust spreads of a layer's implied ``delta`` changes a unit's change must exceed to be read.
SPREADS = 8.0
#: How many units a message names of each kind.
NAMED = 5


@dataclasses.dataclass(frozen=True)
class Reading:
    """A pattern a failing gradient agrees with: its words, and the units named (``(K, 3)``)."""

    text: str
    units: np.ndarray


def named(
    comparison: Comparison,
    held: Passes,
    plain: Passes,
    options: Options,
    candidate: np.ndarray,
    reference: tuple[str, GradAnswer],
    dtype: str,
) -> Comparison:
    """``comparison`` (a candidate's, on ``held``: the passes at the pattern its activations show) with a
    line naming the piece its gradient took, where one of the readings agrees at every entry; as it is
    otherwise. ``plain``: the passes on float64's pattern; ``reference``: its name and every-entry answer."""
    pattern = held.pattern
    if comparison.status != "mismatch" or pattern is None:
        return comparison
    found = _reading(comparison, held, plain, options, candidate, reference, dtype)
    if found is None:
        return comparison
    line = f"its activations and its gradient took different ReLU pieces: {found.text}"
    return dataclasses.replace(comparison, message=f"{comparison.message}\n{line}")


def _reading(
    comparison: Comparison,
    held: Passes,
    plain: Passes,
    options: Options,
    candidate: np.ndarray,
    reference: tuple[str, GradAnswer],
    dtype: str,
) -> Reading | None:
    """The first reading that agrees at every entry, or None."""
    pattern = held.pattern
    assert pattern is not None
    name, answer = reference
    held.forget_kinks(dtype)  # the comparison's kink judgement: made for it alone, not needed again
    if len(pattern.flipped):
        # Memos of its own, dropped with it: a diagnosis keeps nothing gradient-sized for the run.
        alone = dataclasses.replace(
            plain, models=dict(plain.models), underflows=dict(plain.underflows), kinks={}
        )
        found = compare_full(alone, options, candidate, comparison.backend, name, answer, dtype)
        if found.passed:
            units = pattern.flipped
            text = (
                "its gradient is float64's piece (on float64's ReLU pattern every entry agrees), not the "
                f"piece its activations show (which differs from float64's at {len(units)} units "
                f"{_units(units)})"
            )
            return Reading(text, units)
    masks = implied(pattern, candidate)
    if masks is None:
        return None
    toggled = _toggled(pattern, masks)
    if not len(toggled):
        return None
    other = otherwise(pattern, masks, toggled)
    moved = dataclasses.replace(held, deltas=other.deltas, pattern=other, kinks={})
    found = compare_full(moved, options, candidate, comparison.backend, name, answer, dtype)
    if not found.passed:
        return None
    return Reading(_said(pattern, toggled), toggled)


def implied(pattern: Pattern, candidate: np.ndarray) -> list[np.ndarray] | None:
    """The ReLU masks of the backward pass that ``candidate`` (``(L, d, d)``) implies on ``pattern``'s
    forward pass (module docstring, 2), or None where the batch is wider than a layer (the implied
    ``delta`` is not unique)."""
    fwd = pattern.fwd
    batch, dim = fwd.ys[0].shape
    if batch > dim:
        return None
    masks = [mask.copy() for mask in fwd.masks]
    gradient = np.asarray(candidate, np.float64)
    g = 2.0 * fwd.ys[-1]
    for k in reversed(range(len(masks))):
        y, delta = fwd.ys[k], masks[k] * g
        change, *_ = np.linalg.lstsq(y.T, gradient[k] - y.T @ delta, rcond=None)
        spread = 1.4826 * float(np.median(np.abs(change)))
        off = masks[k] & _near(change, -delta, spread)
        on = ~masks[k] & _near(change, g, spread)
        masks[k] = (masks[k] & ~off) | on
        g = (masks[k] * g) @ fwd.weights[k].T
    return masks


def _near(change: np.ndarray, target: np.ndarray, spread: float) -> np.ndarray:
    """Where ``change`` is within ``NEAR`` of a ``target`` that stands out of the spread."""
    size = np.abs(target)
    return (np.abs(change - target) <= NEAR * size) & (size > SPREADS * spread)


def otherwise(pattern: Pattern, masks: list[np.ndarray], toggled: np.ndarray) -> Pattern:
    """``pattern`` with its backward pass on ``masks`` (its forward pass as it is): the piece a gradient
    that took ``toggled`` units otherwise is the exact gradient of."""
    deltas, _ = backward(dataclasses.replace(pattern.fwd, masks=masks), grads=False)
    flipped = np.concatenate([pattern.flipped, toggled]).astype(np.int64)
    return dataclasses.replace(pattern, deltas=deltas, flipped=flipped)


def _toggled(pattern: Pattern, masks: list[np.ndarray]) -> np.ndarray:
    """``(K, 3)``: the units ``(layer, row, unit)`` whose mask in ``masks`` differs from ``pattern``'s."""
    found = [
        np.column_stack([np.full(len(rows), k), rows, units])
        for k, (mine, shown) in enumerate(zip(masks, pattern.fwd.masks, strict=True))
        for rows, units in [np.nonzero(mine != shown)]
    ]
    return np.concatenate(found).astype(np.int64) if found else np.zeros((0, 3), np.int64)


def _said(pattern: Pattern, toggled: np.ndarray) -> str:
    """The words of reading 2: the units on in the activations and off in the gradient, and the others."""
    shown = np.array([pattern.fwd.masks[k][n, j] for k, n, j in toggled], bool)
    parts = []
    for on, words in (
        (True, "on in its activations, off in its gradient"),
        (False, "off in its activations, on in its gradient"),
    ):
        units = toggled[shown == on]
        if len(units):
            zeros = int(sum(pattern.fwd.zs[k][n, j] == 0 for k, n, j in units))
            exact = ", each an exact zero" if zeros == len(units) else f", {zeros} of them exact zeros"
            parts.append(f"{words} at {len(units)} units {_units(units)}{exact if zeros else ''}")
    return (
        "its gradient is that of the pattern its activations show with "
        f"{len(toggled)} units taken otherwise (on that pattern every entry agrees): " + "; ".join(parts)
    )


def _units(units: np.ndarray) -> str:
    """The first ``NAMED`` units ``(layer, row, unit)``, and how many more."""
    shown = ", ".join(str(tuple(int(i) for i in unit)) for unit in units[:NAMED])
    return shown + (f" and {len(units) - NAMED} more" if len(units) > NAMED else "")
