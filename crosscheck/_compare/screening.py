"""Screening's one vocabulary, spoken by its three algorithms (a gradient screened layer by layer, an
HVP screened the same way, a workload's tensors screened alone or in groups): each workload's judge
imports it, it imports none.

Like torch's ``gradcheck``, one comparison has two modes: fast, along random directions (the candidate's
gradient and every tolerance term projected on them, against the oracle's directional derivatives), and
slow, every entry. Each algorithm screens *blocks* (a layer; a tensor, or a group of tensors taken as
one), and a block whose directions do not all agree is *escalated* to its entries (checked entry by
entry). The words:

- ``Directions``: a block's verdict direction by direction: ``diff`` (the candidate's projection less
  the oracle's, in magnitude), ``tol`` (its tolerance), ``judged`` (the oracle could judge it),
  ``failing`` (judged, and beyond its tolerance); the counts a report shows (``mismatched``,
  ``unjudgeable``), each direction's ``ratio`` to its tolerance and the ``worst`` judged one, whether
  the block ``agrees`` (``of``: from a record with the same field names);
- ``escalated``: the blocks checked entry by entry (``ESCALATED``);
- the coverage (what was done to judge a block, in words): ``SCREENED``, ``coverage``, ``AGREES``;
- ``row``: a block's row of a report's ``screening`` table.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

#: How a block judged along random directions is said (a coverage starts with it).
SCREENED = "screened"
#: What a block whose directions did not all agree is: escalated to its entries.
ESCALATED = "checked entry by entry"
#: What a block whose every direction agrees says.
AGREES = "every direction agrees"


def ratio(diff: np.ndarray, tol: np.ndarray) -> np.ndarray:
    """Each direction's difference over its tolerance (0 where the difference is 0, even at 0 / 0)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(diff == 0, 0.0, diff / tol)


def failing(diff: np.ndarray, tol: np.ndarray, judged: np.ndarray) -> np.ndarray:
    """The judged directions not within their tolerance (a NaN difference is not within it)."""
    return judged & ~(diff <= tol)


@dataclasses.dataclass(frozen=True)
class Directions:
    """A block's verdict along its directions (see the module's words)."""

    diff: np.ndarray
    tol: np.ndarray
    judged: np.ndarray
    failing: np.ndarray

    @classmethod
    def of(cls, row: Mapping[str, Any]) -> Directions:
        """From a record with the same field names (a workload's row of one tensor or group)."""
        return cls(row["diff"], row["tol"], row["judged"], row["failing"])

    @property
    def mismatched(self) -> int:
        """How many directions disagree."""
        return int(np.count_nonzero(self.failing))

    @property
    def unjudgeable(self) -> int:
        """How many directions the oracle could not judge."""
        return int(np.size(self.judged) - np.count_nonzero(self.judged))

    @property
    def ratio(self) -> np.ndarray:
        return ratio(self.diff, self.tol)

    @property
    def worst(self) -> int:
        """The judged direction furthest beyond (or closest to) its tolerance."""
        return int(np.argmax(np.where(self.judged, self.ratio, -1.0)))

    @property
    def agrees(self) -> bool:
        """At least one direction judged, and none disagrees: the block needs no entry checked."""
        return bool(self.judged.any() and not self.failing.any())


def escalated(failing: np.ndarray, also: Iterable[int] = ()) -> list[int]:
    """The blocks escalated to their entries: those with a failing direction (``failing``: blocks x
    directions) and ``also`` (blocks escalated whatever their directions say)."""
    return sorted({int(k) for k in np.nonzero(failing)[0]} | set(also))


def coverage(blocks: int, block: str, per: int, escalated: Sequence[int]) -> str:
    """What was screened, in words: ``blocks`` blocks (each a ``block``) of ``per`` directions, and
    those escalated to their entries."""
    return (
        f"{SCREENED}: {blocks} {block}s x {per} random directions; "
        f"{block}s {ESCALATED}: {list(escalated) or 'none'}"
    )


def row(block: str, index: int, found: Directions, escalated: bool) -> dict[str, Any]:
    """A block's row of a report's ``screening`` table: its directions, how many disagree, the worst
    difference over its tolerance, and whether it was escalated to its entries (``full_check``)."""
    return {
        block: index,
        "directions": int(np.size(found.diff)),
        "mismatched": found.mismatched,
        "worst_ratio": float(found.ratio[found.worst]),
        "full_check": escalated,
    }
