"""Entry-by-entry comparison of a candidate with a reference, into records; never raises on a mismatch.

The records (``Tolerance``, ``Kinks``, ``Comparison``) live in ``record``, the one message format in
``message``: a judge imports each from its home.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from crosscheck._compare.entries import Scan, scan
from crosscheck._compare.message import mismatch_message
from crosscheck._compare.record import Comparison, Kinks, Tolerance
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
    keep: bool = False,
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

    The entries are judged a block of rows at a time (``entries``: a tensor of any size costs a few
    blocks of temporaries); the per-entry arrays a plot draws (``arrays``) are kept only with ``keep``
    (a run that asks for a plot: ``Options.plot``). The worst entries are the largest ratios, the last
    index first on ties.
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
    splits = split is not None and reference.ndim > 0
    found = scan(candidate, reference, tolerance, kinks, split=splits, keep=keep)
    helps = {**TERM_HELP, **(term_help or {})}
    comparison = dataclasses.replace(
        _counted(common, found, kinks, strict=strict),
        tolerance_sources={name: helps.get(name, "") for name in tolerance.terms},
    )
    if found.judged:
        comparison = _with_extremes(comparison, found, candidate, reference, tolerance, kinks)
        if split is not None:
            comparison = dataclasses.replace(comparison, per_layer=_split(split, found))
    return dataclasses.replace(comparison, message=mismatch_message(comparison))


def _counted(c: Comparison, found: Scan, kinks: Kinks, *, strict: bool) -> Comparison:
    """``c`` with its verdict and its counts: mismatched, judged, unjudgeable (and why), two-sided, and
    the kinks involved."""
    n_unjudgeable = int(np.count_nonzero(kinks.unjudgeable))
    passed = found.mismatched == 0 and not (strict and n_unjudgeable) and found.judged > 0
    return dataclasses.replace(
        c,
        passed=passed,
        status="ok" if passed else "mismatch" if found.judged else "unjudgeable",
        mismatched=found.mismatched,
        judged=found.judged,
        unjudgeable=n_unjudgeable,
        two_sided=found.two_sided,
        unjudgeable_reasons=_reason_counts(kinks),
        kinks=found.kink_locations(kinks.width),
    )


def _reason_counts(kinks: Kinks) -> dict[str, int]:
    reasons, counts = np.unique(kinks.reason[kinks.unjudgeable], return_counts=True)
    return {str(r): int(n) for r, n in zip(reasons, counts, strict=True)}


def _with_extremes(
    c: Comparison,
    found: Scan,
    candidate: np.ndarray,
    reference: np.ndarray,
    tolerance: Tolerance,
    kinks: Kinks,
) -> Comparison:
    """``c`` with its greatest differences, worst entries and (for a plot) per-entry arrays."""
    shape = reference.shape
    (abs_index, abs_value), (rel_index, rel_value), (worst_index, worst_ratio) = (
        (_index(flat, shape), value) for flat, value in (found.abs_diff, found.rel_diff, found.worst)
    )
    terms = tolerance.at(worst_index)
    arrays = found.arrays and {**found.arrays, "unjudgeable": kinks.unjudgeable}
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
        worst_entries=_worst_entries(found, candidate, reference, tolerance, kinks),
        arrays=arrays,
    )


def _index(flat: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(int(i) for i in np.unravel_index(flat, shape))


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


def _split(axis: str, found: Scan) -> list[dict[str, Any]]:
    """Per index ``i`` of the leading axis (named ``axis``): judged entries, mismatches and the largest
    difference / tolerance."""
    if not found.split:
        return []
    rows = {key: np.concatenate([part[key] for part in found.split]) for key in found.split[0]}
    return [
        {axis: i, "judged": int(judged), "mismatched": int(mismatched), "worst_ratio": float(worst)}
        for i, (judged, mismatched, worst) in enumerate(
            zip(rows["judged"], rows["mismatched"], rows["worst_ratio"], strict=True)
        )
    ]


def _worst_entries(
    found: Scan,
    candidate: np.ndarray,
    reference: np.ndarray,
    tolerance: Tolerance,
    kinks: Kinks,
) -> list[dict[str, Any]]:
    """The judged entries furthest past (or closest to) their tolerance, with everything about them."""
    out = []
    for ratio, position in zip(*found.top, strict=True):
        index = _index(int(position), reference.shape)
        kink = [int(v) for v in kinks.kink[index]]
        out.append(
            {
                "index": list(index),
                "candidate": float(candidate[index]),
                "reference": float(reference[index]),
                "ratio": float(ratio),
                "terms": tolerance.at(index),
                "kink": kink if kink and kink[0] >= 0 else None,
            }
        )
    return out
