"""Entry-by-entry comparison of a candidate with a reference, into records; never raises on a mismatch.

The records (``Tolerance``, ``Kinks``, ``Comparison``) live in ``record``, the one message format in
``message``; both are re-exported here, where every judge imports them from.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from crosscheck._compare.message import index_text as index_text
from crosscheck._compare.message import mismatch_message as mismatch_message
from crosscheck._compare.record import Comparison as Comparison
from crosscheck._compare.record import Kinks as Kinks
from crosscheck._compare.record import Tolerance as Tolerance
from crosscheck._compare.terms import TERM_HELP


def compare(
    candidate: Any,
    reference: np.ndarray,
    tolerance: Tolerance,
    *,
    backend: str,
    reference_name: str,
    dtype: str,
    kinks: Kinks | None = None,
    strict: bool = False,
    parameter: str | None = None,
    index_names: Sequence[str] | None = None,
    term_help: Mapping[str, str] | None = None,
    split: str | None = None,
) -> Comparison:
    """Compare ``candidate`` with ``reference`` entry by entry.

    An entry mismatches when ``|candidate - reference| > tolerance.total()``; where one kink may
    legitimately flip, the entry is judged on both sides of it (it must match one). Unjudgeable entries
    are counted, not judged (with ``strict=True`` they fail the comparison). Wrong shape, wrong dtype
    and non-finite values make the comparison fail with a message; nothing raises. ``parameter`` names
    the parameter compared and ``index_names`` its axes (the stack's ``("layer", "row", "col")``);
    messages say both where given. ``term_help`` explains the workload's tolerance terms (the terms
    every workload shares, ``terms.TERM_HELP``, need none). ``split`` names the leading axis when
    the workload wants a row per index along it (``per_layer``: judged, mismatched, worst ratio).
    """
    names = list(index_names) if index_names is not None else None
    common = Comparison(
        backend=backend,
        reference=reference_name,
        passed=False,
        status="invalid",
        total=int(np.size(reference)),
        parameter=parameter,
        index_names=names,
    )
    candidate = np.asarray(candidate)
    problem = structural_problem(candidate, reference.shape, dtype)
    if problem:
        where = f"parameter `{parameter}`: " if parameter else ""
        return dataclasses.replace(common, message=where + problem)
    kinks = kinks or Kinks.none(reference.shape)
    entries = _Entries.of(candidate, reference, tolerance, kinks)
    helps = {**TERM_HELP, **(term_help or {})}
    comparison = dataclasses.replace(
        _counted(common, entries, kinks, strict=strict),
        tolerance_sources={name: helps.get(name, "") for name in tolerance.terms},
    )
    if np.any(entries.judged):
        comparison = _with_extremes(comparison, entries, candidate, reference, tolerance, kinks)
        if split is not None:
            comparison = dataclasses.replace(comparison, per_layer=_split(split, entries))
    return dataclasses.replace(comparison, message=mismatch_message(comparison))


@dataclasses.dataclass(frozen=True)
class _Entries:
    """Per entry: the difference (the nearer side of a kink where two sides count), its relative size,
    difference / tolerance, and which entries are judged, two-sided and over their tolerance."""

    diff: np.ndarray
    rel: np.ndarray
    ratio: np.ndarray
    judged: np.ndarray
    two_sided: np.ndarray
    over: np.ndarray

    @classmethod
    def of(cls, candidate: np.ndarray, reference: np.ndarray, tolerance: Tolerance, kinks: Kinks) -> _Entries:
        # NaN in the reference marks entries not checked (what a screening did not send to a full check).
        judged = ~kinks.unjudgeable & np.isfinite(reference)
        with np.errstate(invalid="ignore"):
            diff = np.abs(candidate.astype(np.float64) - reference)
        two_sided = judged & ~np.isnan(kinks.alternative)
        if np.any(two_sided):
            other = np.abs(candidate.astype(np.float64) - kinks.alternative)
            diff = np.where(two_sided, np.fmin(diff, other), diff)
        tol = np.broadcast_to(tolerance.total(), reference.shape)
        with np.errstate(divide="ignore", invalid="ignore"):
            rel = diff / np.abs(reference)
            ratio = np.where(diff == 0, 0.0, diff / tol)
            over = diff > tol
        return cls(diff, rel, ratio, judged, two_sided, over)


def _counted(c: Comparison, entries: _Entries, kinks: Kinks, *, strict: bool) -> Comparison:
    """``c`` with its verdict and its counts: mismatched, judged, unjudgeable (and why), two-sided, and
    the kinks involved."""
    judged = entries.judged
    mismatched = int(np.count_nonzero(judged & entries.over))
    n_unjudgeable = int(np.count_nonzero(kinks.unjudgeable))
    passed = mismatched == 0 and not (strict and n_unjudgeable) and bool(np.any(judged))
    return dataclasses.replace(
        c,
        passed=passed,
        status="ok" if passed else "mismatch" if np.any(judged) else "unjudgeable",
        mismatched=mismatched,
        judged=int(np.count_nonzero(judged)),
        unjudgeable=n_unjudgeable,
        two_sided=int(np.count_nonzero(entries.two_sided)),
        unjudgeable_reasons=_reason_counts(kinks),
        kinks=_kink_locations(kinks, entries.two_sided),
    )


def _reason_counts(kinks: Kinks) -> dict[str, int]:
    reasons, counts = np.unique(kinks.reason[kinks.unjudgeable], return_counts=True)
    return {str(r): int(n) for r, n in zip(reasons, counts, strict=True)}


def _kink_locations(kinks: Kinks, two_sided: np.ndarray) -> list[list[int]]:
    """The kinks behind unjudgeable and two-sided entries, each once (each its index, as wide as the
    workload's)."""
    involved = kinks.unjudgeable | two_sided
    if not kinks.width:
        return []
    locations = np.unique(kinks.kink[involved].reshape(-1, kinks.width), axis=0)
    return [[int(i) for i in k] for k in locations if k[0] >= 0]


def _with_extremes(
    c: Comparison,
    entries: _Entries,
    candidate: np.ndarray,
    reference: np.ndarray,
    tolerance: Tolerance,
    kinks: Kinks,
) -> Comparison:
    """``c`` with its greatest differences, worst entries and per-entry arrays."""
    judged = entries.judged
    abs_index, abs_value = _argmax(entries.diff, judged)
    rel_index, rel_value = _argmax(np.where(entries.diff == 0, 0.0, entries.rel), judged)
    worst_index, worst_ratio = _argmax(entries.ratio, judged)
    terms = tolerance.at(worst_index)
    return dataclasses.replace(
        c,
        max_abs_diff=abs_value,
        max_abs_diff_index=abs_index,
        max_rel_diff=rel_value,
        max_rel_diff_index=rel_index,
        worst_index=worst_index,
        worst_ratio=worst_ratio,
        worst_terms=terms,
        worst_values={"candidate": float(candidate[worst_index]), "reference": float(reference[worst_index])},
        decided_by=max(terms, key=lambda name: terms[name]),
        worst_entries=_worst_entries(entries.ratio, judged, candidate, reference, tolerance, kinks),
        arrays={
            "ratio": np.where(judged, entries.ratio, np.nan),
            "unjudgeable": kinks.unjudgeable,
            "two_sided": entries.two_sided,
        },
    )


def _argmax(values: np.ndarray, judged: np.ndarray) -> tuple[tuple[int, ...], float]:
    """The judged entry with the largest value (NaN counts as 0), and that value."""
    masked = np.where(judged, np.nan_to_num(values, nan=0.0, posinf=np.inf), -1.0)
    index = tuple(int(i) for i in np.unravel_index(int(np.argmax(masked)), masked.shape))
    return index, float(masked[index])


def structural_problem(candidate: np.ndarray, shape: tuple[int, ...], dtype: str) -> str:
    """Why ``candidate`` cannot be compared entry by entry (shape, dtype, finiteness), or ``""``."""
    if candidate.shape != shape:
        return f"wrong shape: expected {shape}, found {candidate.shape}."
    if candidate.dtype.name != dtype:
        return f"wrong dtype: expected {dtype} (the case's dtype), found {candidate.dtype.name}."
    finite = np.isfinite(candidate)
    if not np.all(finite):
        first = tuple(int(i) for i in np.argwhere(~finite)[0])
        return (
            f"non-finite gradient: {int(np.size(finite) - np.count_nonzero(finite))} of "
            f"{candidate.size} entries are NaN or infinite, the first at {first}."
        )
    return ""


def _split(axis: str, entries: _Entries) -> list[dict[str, Any]]:
    """Per index ``i`` of the leading axis (named ``axis``): judged entries, mismatches and the largest
    difference / tolerance."""
    ratio, judged, over = entries.ratio, entries.judged, entries.over
    out = []
    for i in range(ratio.shape[0] if ratio.ndim else 0):
        seen = judged[i]
        worst = float(np.max(np.where(seen, ratio[i], 0.0), initial=0.0))
        out.append(
            {
                axis: i,
                "judged": int(np.count_nonzero(seen)),
                "mismatched": int(np.count_nonzero(seen & over[i])),
                "worst_ratio": worst,
            }
        )
    return out


def _worst_entries(
    ratio: np.ndarray,
    judged: np.ndarray,
    candidate: np.ndarray,
    reference: np.ndarray,
    tolerance: Tolerance,
    kinks: Kinks,
    count: int = 5,
) -> list[dict[str, Any]]:
    """The judged entries furthest past (or closest to) their tolerance, with everything about them."""
    flat = np.where(judged, ratio, -1.0).ravel()
    order = np.argsort(flat)[::-1][:count]
    out = []
    for position in order:
        if flat[position] < 0:
            break
        index = tuple(int(i) for i in np.unravel_index(int(position), ratio.shape))
        kink = [int(v) for v in kinks.kink[index]]
        out.append(
            {
                "index": list(index),
                "candidate": float(candidate[index]),
                "reference": float(reference[index]),
                "ratio": float(ratio[index]),
                "terms": tolerance.at(index),
                "kink": kink if kink and kink[0] >= 0 else None,
            }
        )
    return out
