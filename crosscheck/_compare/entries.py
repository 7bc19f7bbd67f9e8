"""The per-entry pass of a comparison, a block of rows at a time.

A block is ``CHUNK`` entries or so (whole rows of the leading axis): its float64 temporaries (the
difference, its relative size, difference / tolerance, the tolerance's total) are a block's size
whatever the tensor's, and what the comparison keeps is merged from block to block: counts, the first
judged entry of the greatest difference (as ``np.argmax``), the worst ``WORST`` entries, the per-index
rows of the leading axis and the kinks involved. Every entry's numbers are the same element-wise
operations as on the whole tensor, so each count, index and value is the one the whole tensor gives.
A block none of whose judged ratios can enter the worst entries kept so far skips their selection.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from crosscheck._compare import whole
from crosscheck._compare.record import Kinks, Made, Tolerance

#: Entries a block holds (at least one row of the leading axis): its float64 temporaries stay this size.
CHUNK = 1 << 18
#: How many of the worst judged entries a comparison lists.
WORST = 5


@dataclasses.dataclass(frozen=True)
class Block:
    """One block's entries, flattened in C order from flat index ``start``: the difference (the nearer
    side of a kink where two sides count), its relative size, difference / tolerance, and which entries
    are judged, two-sided, over their tolerance and unjudgeable."""

    start: int
    rows: int
    reference: np.ndarray
    diff: np.ndarray
    ratio: np.ndarray
    judged: np.ndarray
    two_sided: np.ndarray
    over: np.ndarray
    unjudgeable: np.ndarray
    #: Where the difference is 0 (None: not made; ``rel`` makes it).
    zero: np.ndarray | None = None

    @classmethod
    def of(cls, c: np.ndarray, r: np.ndarray, tol: np.ndarray, kinks: Kinks, start: int) -> Block:
        """The block of candidate ``c`` and reference ``r`` (each a block of rows), ``tol`` its total
        tolerance and ``kinks`` its kinks' block (``alternative`` and ``unjudgeable``)."""
        unjudgeable = np.asarray(kinks.unjudgeable).ravel()
        ref = r.ravel()
        # NaN in the reference marks entries not checked (what a screening did not send to a full check).
        judged = ~unjudgeable & np.isfinite(ref)
        wide = c.astype(np.float64).ravel()
        if _none(kinks.alternative):  # no kink's other side (``Kinks.none``): nothing two-sided
            two_sided = np.zeros(judged.shape, bool)
        else:
            two_sided = judged & ~np.isnan(kinks.alternative).ravel()
        with np.errstate(invalid="ignore"):
            if np.any(two_sided):
                diff = np.abs(wide - ref)
                other = np.abs(wide - kinks.alternative.ravel())
                diff = np.where(two_sided, np.fmin(diff, other), diff)
            else:  # the same numbers, made in the widened copy
                diff = np.abs(np.subtract(wide, ref, out=wide), out=wide)
        del wide
        tol = tol.ravel()
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.divide(diff, tol)  # then 0 where the difference is (``np.where``'s numbers)
            zero = diff == 0
            if zero.any():
                np.copyto(ratio, 0.0, where=zero)
            over = diff > tol
        return cls(start, int(r.shape[0]), ref, diff, ratio, judged, two_sided, over, unjudgeable, zero)

    def rel(self) -> np.ndarray:
        """The difference relative to the reference (0 where the difference is)."""
        rel = np.abs(self.reference, dtype=np.float64)  # its own array (|widened|, exact): divided in place
        with np.errstate(divide="ignore", invalid="ignore"):
            np.divide(self.diff, rel, out=rel)
        zero = self.diff == 0 if self.zero is None else self.zero
        if zero.any():
            np.copyto(rel, 0.0, where=zero)
        return rel


def blocks(candidate: np.ndarray, reference: np.ndarray, tolerance: Tolerance, kinks: Kinks):
    """The blocks of a comparison, in order (a 0-d tensor is one block of one row)."""
    shape = reference.shape
    lead = shape or (1,)
    rest = math.prod(lead[1:])
    step = max(1, CHUNK // max(rest, 1))

    def view(x: Any, extra: tuple[int, ...] = ()) -> np.ndarray:
        return np.broadcast_to(x, shape + extra).reshape(lead + extra)

    c, r = view(candidate), view(reference)
    terms = [t if isinstance(t, Made) else view(t) for t in tolerance.terms.values()]
    unjudgeable, kink, alternative = (
        view(kinks.unjudgeable),
        view(kinks.kink, (kinks.width,)),
        view(kinks.alternative),
    )
    for a in range(0, lead[0], step):
        rows = slice(a, a + step)
        total = np.zeros(())
        for t in terms:  # in order, as ``Tolerance.total`` (in place once it is the block's shape)
            term = t.rows(rows) if isinstance(t, Made) else np.asarray(t[rows], dtype=np.float64)
            if total.shape == np.broadcast_shapes(total.shape, term.shape) and total.ndim:
                np.add(total, term, out=total)
            else:
                total = total + term
        tol = np.broadcast_to(total, r[rows].shape)
        part = Kinks(unjudgeable[rows], kinks.reason, kink[rows], alternative[rows])
        yield Block.of(c[rows], r[rows], tol, part, a * rest), kink[rows]


def argmax(values: np.ndarray, judged: np.ndarray, every: bool = False) -> tuple[int, float]:
    """The first judged entry with the largest value (NaN counts as 0), and that value (-1 where none
    is judged); ``every``: every entry is judged (``values`` read as they are, copied only to clean)."""
    masked = values if every else np.where(judged, values, -1.0)
    if not whole.finite(masked):  # a pass of its own only where there is a NaN or an infinity
        masked = np.array(masked, np.float64) if every else masked  # ``values`` left as they are
        np.nan_to_num(masked, copy=False, nan=0.0, posinf=np.inf)
    index = int(np.argmax(masked))
    return index, float(masked[index])


def top(
    ratio: np.ndarray, judged: np.ndarray, start: int, count: int = WORST
) -> tuple[np.ndarray, np.ndarray]:
    """The ``count`` worst judged entries of a block: ``(ratios, flat indices)``, NaN first, then the
    largest ratio, the last index on ties (in no particular order: ``merge`` orders them)."""
    flat = np.where(judged, ratio, -np.inf)
    nan = np.isnan(flat)
    picked = np.flatnonzero(nan)[-count:]
    need = count - picked.size
    if need > 0:
        numbers = np.where(nan, -np.inf, flat)
        if numbers.size > need:
            kth = np.partition(numbers, numbers.size - need)[numbers.size - need]
            above = np.flatnonzero(numbers > kth)  # fewer than ``need``: the rest are ties at ``kth``
            at = np.flatnonzero((numbers == kth) & ~nan)[above.size - need :]
            picked = np.concatenate([picked, above, at])
        else:
            picked = np.concatenate([picked, np.flatnonzero(~nan)])
    values = flat[picked]
    keep = ~(values < 0)  # not judged (-inf); NaN stays, as ``argsort`` put it first
    return values[keep], picked[keep] + start


def merge(values: np.ndarray, index: np.ndarray, count: int = WORST) -> tuple[np.ndarray, np.ndarray]:
    """The ``count`` worst of ``(values, index)``, worst first: NaN, then the largest value, the last
    index on ties (the order of a stable ascending sort, reversed)."""
    nan = np.isnan(values)
    order = np.lexsort((-index, -np.where(nan, 0.0, values), ~nan))[:count]
    return values[order], index[order]


def split_rows(block: Block) -> dict[str, np.ndarray]:
    """Per row of ``block`` (an index of the leading axis): judged entries, mismatches and the largest
    difference / tolerance (0 where none is judged; NaN where a judged one is NaN)."""
    seen = block.judged.reshape(block.rows, -1)
    ratio = block.ratio.reshape(block.rows, -1)
    return {
        "judged": np.count_nonzero(seen, axis=1),
        "mismatched": np.count_nonzero(seen & block.over.reshape(block.rows, -1), axis=1),
        "worst_ratio": np.max(np.where(seen, ratio, 0.0), axis=1, initial=0.0),
    }


def kink_rows(block: Block, kink: np.ndarray) -> np.ndarray:
    """The kinks behind a block's unjudgeable and two-sided entries, each once (sorted)."""
    width = kink.shape[-1]
    involved = block.unjudgeable | block.two_sided
    if not involved.any():  # none (the common block): what ``np.unique`` of no row gives, made at once
        return np.empty((0, width), kink.dtype)
    return np.unique(kink.reshape(-1, width)[involved], axis=0)


@dataclasses.dataclass
class Scan:
    """What a comparison keeps of every block: counts, the greatest absolute and relative difference
    and difference / tolerance (``(flat index, value)``, the first on ties), the worst entries, the
    per-row split, the kinks involved and, for a plot, the per-entry arrays (``ratio``, NaN where not
    judged, and ``two_sided``)."""

    judged: int = 0
    mismatched: int = 0
    two_sided: int = 0
    abs_diff: tuple[int, float] = (0, -np.inf)
    rel_diff: tuple[int, float] = (0, -np.inf)
    worst: tuple[int, float] = (0, -np.inf)
    top: tuple[np.ndarray, np.ndarray] = (np.empty(0), np.empty(0, np.intp))
    split: list[dict[str, np.ndarray]] = dataclasses.field(default_factory=list)
    kinks: list[np.ndarray] = dataclasses.field(default_factory=list)
    arrays: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)

    def add(self, block: Block, kink: np.ndarray, *, split: bool) -> None:
        """Merge ``block`` (its kinks' indices ``kink``) into what is kept."""
        judged = block.judged
        self.judged += int(np.count_nonzero(judged))
        self.mismatched += int(np.count_nonzero(judged & block.over))
        self.two_sided += int(np.count_nonzero(block.two_sided))
        if kink.shape[-1]:
            self.kinks.append(kink_rows(block, kink))
        if self.arrays:
            end = block.start + block.judged.size
            self.arrays["ratio"].reshape(-1)[block.start : end] = np.where(judged, block.ratio, np.nan)
            self.arrays["two_sided"].reshape(-1)[block.start : end] = block.two_sided
        if split:
            self.split.append(split_rows(block))
        if not np.any(judged):
            return
        every = bool(judged.all())  # (the common block) each greatest entry taken without a masked copy
        self.abs_diff = _first(self.abs_diff, argmax(block.diff, judged, every), block.start)
        self.rel_diff = _first(self.rel_diff, argmax(block.rel(), judged, every), block.start)
        self.worst = _first(self.worst, argmax(block.ratio, judged, every), block.start)
        if _below(block.ratio, judged, self.top[0]):  # none of its entries can be among the worst
            return
        values, index = top(block.ratio, judged, block.start)
        self.top = merge(np.concatenate([self.top[0], values]), np.concatenate([self.top[1], index]))

    def kink_locations(self, width: int) -> list[list[int]]:
        """The kinks involved, each once, sorted (those with an index, ``k[0] >= 0``)."""
        if not width:
            return []
        found = np.unique(np.concatenate(self.kinks), axis=0) if self.kinks else np.empty((0, width), int)
        return [[int(i) for i in k] for k in found if k[0] >= 0]


def _none(alternative: np.ndarray) -> bool:
    """Whether ``alternative`` is one NaN broadcast (``Kinks.none``'s: no entry has a kink's other side)."""
    a = np.asarray(alternative)
    return a.size > 0 and not any(a.strides) and bool(np.isnan(a.reshape(-1)[0]))


def _below(ratio: np.ndarray, judged: np.ndarray, kept: np.ndarray, count: int = WORST) -> bool:
    """Whether no judged entry of a block can enter the ``count`` worst kept so far (``kept``, worst
    first, as ``merge`` orders them): they are ``count``, and every judged ratio of the block is a number
    below the least of them (a tie or a NaN enters: a later index wins a tie)."""
    if kept.size < count:
        return False
    largest = float(np.max(ratio, where=judged, initial=-np.inf))
    least = float(kept[-1])
    return not math.isnan(largest) and (math.isnan(least) or largest < least)


def _first(best: tuple[int, float], found: tuple[int, float], start: int) -> tuple[int, float]:
    """The greater of ``best`` and a block's ``found`` (at ``start``); the earlier one on a tie."""
    return (start + found[0], found[1]) if found[1] > best[1] else best


def scan(
    candidate: np.ndarray,
    reference: np.ndarray,
    tolerance: Tolerance,
    kinks: Kinks,
    *,
    split: bool,
    keep: bool,
) -> Scan:
    """Every block of a comparison merged (``keep``: with the per-entry arrays a plot draws)."""
    found = Scan()
    if keep:
        found.arrays = {
            "ratio": np.empty(reference.shape),
            "two_sided": np.empty(reference.shape, bool),
        }
    for block, kink in blocks(candidate, reference, tolerance, kinks):
        found.add(block, kink, split=split)
    return found
