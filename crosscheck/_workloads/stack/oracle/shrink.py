"""The step loop the stack's two kink-aware oracles share (``fd``: a weight's central difference;
``outputs``: a layer output's central or one-sided stencil).

Each perturbation is tried at its step; one whose points crossed no kink keeps its difference. One that
crossed is planned again below the kink it crossed (the caller's rule: a stencil knows its own points)
and never at less than the smallest step, tried there once, then given up on: it sits on a kink, and
takes the derivative of the base point's piece (the masks held), flagged. What differs between the two
oracles (how a step is planned and shrunk, what step a difference reports) is the caller's ``attempt``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["SHRINK", "Attempt", "differences"]

#: After a crossing a step shrinks at least by this factor.
SHRINK = 0.25


@dataclasses.dataclass(frozen=True)
class Attempt:
    """One try of perturbations ``todo`` at their steps.

    Attributes:
        value, error: each difference and its error bound, ``(S,)``.
        crossed: ``(S,)`` bool: a point of the difference crossed a kink.
        at: ``(S, 3)``: the kink crossed (reported if the perturbation ends on a kink).
        step: ``(S,)``: the step a difference that crossed nothing reports (signed for a one-sided one).
        again: given ``crossed``, the next steps of those that crossed (before the smallest-step floor).
    """

    value: np.ndarray
    error: np.ndarray
    crossed: np.ndarray
    at: np.ndarray
    step: np.ndarray
    again: Callable[[np.ndarray], np.ndarray]


def differences(
    step: np.ndarray,
    smallest: float,
    cap: float,
    attempt: Callable[[np.ndarray, np.ndarray], Attempt],
    held: Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]],
) -> dict[str, Any]:
    """Kink-aware differences of ``len(step)`` perturbations, each from its first ``step`` (shrunk in place).

    Args:
        step: each perturbation's first step (0: none is tried).
        smallest: the smallest step tried; a perturbation crossing a kink even there sits on it.
        cap: the step at which the base point's piece is differenced for those on a kink.
        attempt: ``attempt(todo, h)`` tries perturbations ``todo`` at steps ``h``.
        held: ``held(stuck, h)``: value and error of perturbations ``stuck`` at steps ``h`` with the
            masks held at the base point's.

    Returns:
        ``value``, ``error``, ``step``, ``kink`` and ``kink_at`` (``(S, 3)``, -1 where no kink) per
        perturbation, and ``evaluations`` (two loss evaluations per difference).
    """
    count = len(step)
    out: dict[str, Any] = {
        "value": np.zeros(count),
        "error": np.zeros(count),
        "step": np.zeros(count),
        "kink": np.zeros(count, bool),
        "kink_at": np.full((count, 3), -1, np.int64),
    }
    pending, evaluations = np.ones(count, bool), 0
    while True:
        todo = np.flatnonzero(pending & (step >= smallest))
        if todo.size == 0:
            break
        tried = attempt(todo, step[todo])
        evaluations += 2 * todo.size
        hit = tried.crossed
        ok = todo[~hit]
        out["value"][ok], out["error"][ok], out["step"][ok] = (
            tried.value[~hit],
            tried.error[~hit],
            tried.step[~hit],
        )
        pending[ok] = False
        again = todo[hit]
        out["kink_at"][again] = tried.at[hit]
        planned = tried.again(hit)
        # Once at the smallest step before giving up (the kink reported is then the one nearest to it).
        step[again] = np.where(step[again] > smallest, np.maximum(planned, smallest), 0.0)
    stuck = np.flatnonzero(pending)
    if stuck.size:
        h = np.full(stuck.size, cap)
        out["value"][stuck], out["error"][stuck] = held(stuck, h)
        out["step"][stuck] = h
        out["kink"][stuck] = True
        evaluations += 2 * stuck.size
    out["kink_at"][~out["kink"]] = -1
    out["evaluations"] = evaluations
    return out
