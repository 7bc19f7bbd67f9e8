"""Entry-by-entry comparison of a candidate with a reference, into records; never raises on a mismatch."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

TERM_HELP = {
    "rounding": "what the candidate's own rounding can produce on this case (modelled, x8 sigma)",
    "reference": "the reference's own error (the oracle's error bar, or the reference's rounding)",
    "floor": "8 unit roundoffs of the largest reference entry: the precision no entry is asked to beat",
    "kinks": "the summed effect of ReLU flips too small to judge the entry on both sides",
    "slack": "user slack: atol + rtol * |reference|",
    "rerun": "the candidate's own rounding, measured by re-running it in the other precision (HVP)",
}


@dataclasses.dataclass(frozen=True)
class Tolerance:
    """Per-entry tolerance as a sum of named terms (each an array broadcastable to the gradient)."""

    terms: dict[str, np.ndarray]

    def total(self) -> np.ndarray:
        return sum(np.asarray(t, dtype=np.float64) for t in self.terms.values())

    def at(self, index: tuple[int, ...]) -> dict[str, float]:
        return {name: float(np.broadcast_to(t, self.shape)[index]) for name, t in self.terms.items()}

    @property
    def shape(self) -> tuple[int, ...]:
        return np.broadcast_shapes(*(np.shape(t) for t in self.terms.values()))


@dataclasses.dataclass(frozen=True)
class Kinks:
    """How ReLU kinks bear on each entry.

    Attributes:
        unjudgeable: bool array, True where the entry cannot be judged.
        reason: object array of reason strings ("" where judgeable).
        kink: int array ``shape + (3,)``: the kink ``(layer, row, unit)`` responsible (-1 where none).
        alternative: where one kink may legitimately flip, the reference on its other side (NaN
            elsewhere): such an entry passes when it matches either side.
    """

    unjudgeable: np.ndarray
    reason: np.ndarray
    kink: np.ndarray
    alternative: np.ndarray

    @classmethod
    def none(cls, shape: tuple[int, ...]) -> Kinks:
        return cls(
            np.zeros(shape, bool),
            np.full(shape, "", object),
            np.full(shape + (3,), -1),
            np.full(shape, np.nan),
        )


@dataclasses.dataclass(frozen=True)
class Comparison:
    """The record of one candidate against the reference (see README, "JSON report")."""

    backend: str
    reference: str
    passed: bool
    status: str
    total: int
    #: The workload parameter compared (None for the stack, whose one parameter is ``weights``).
    parameter: str | None = None
    #: Which question a workload comparison answers: "derivative" (the candidate's gradient against
    #: differences of its own loss) or "same function" (against another function's answer); None for
    #: the stack.
    question: str | None = None
    #: What the reference value is, in words ("differences of `torch`'s own float64 loss").
    against: str = ""
    mismatched: int = 0
    judged: int = 0
    unjudgeable: int = 0
    two_sided: int = 0
    coverage: str = "every entry"
    screening: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    per_layer: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    worst_entries: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    forward: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    classification: dict[str, Any] = dataclasses.field(default_factory=dict)
    #: Per-entry arrays for plots (``ratio``, ``unjudgeable``, ``two_sided``); not part of the JSON.
    arrays: dict[str, Any] = dataclasses.field(default_factory=dict, repr=False, compare=False)
    unjudgeable_reasons: dict[str, int] = dataclasses.field(default_factory=dict)
    kinks: list[list[int]] = dataclasses.field(default_factory=list)
    max_abs_diff: float | None = None
    max_abs_diff_index: tuple[int, ...] | None = None
    max_rel_diff: float | None = None
    max_rel_diff_index: tuple[int, ...] | None = None
    worst_index: tuple[int, ...] | None = None
    worst_ratio: float | None = None
    worst_terms: dict[str, float] | None = None
    worst_values: dict[str, float] | None = None
    decided_by: str | None = None
    tolerance_sources: dict[str, str] = dataclasses.field(default_factory=dict)
    message: str = ""

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(dataclasses.replace(self, arrays={}))
        del out["arrays"]
        for key, value in out.items():
            if isinstance(value, tuple):
                out[key] = list(value)
        return out


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
    term_help: dict[str, str] | None = None,
) -> Comparison:
    """Compare ``candidate`` with ``reference`` entry by entry.

    An entry mismatches when ``|candidate - reference| > tolerance.total()``; where one ReLU kink may
    legitimately flip, the entry is judged on both sides of it (it must match one). Unjudgeable entries
    are counted, not judged (with ``strict=True`` they fail the comparison). Wrong shape, wrong dtype
    and non-finite values make the comparison fail with a message; nothing raises. ``parameter`` names
    the workload parameter compared (messages then name it; indices may have any rank) and
    ``term_help`` explains the tolerance terms (default: the stack's ``TERM_HELP``).
    """
    common = {"backend": backend, "reference": reference_name, "total": int(np.size(reference))}
    common["parameter"] = parameter
    candidate = np.asarray(candidate)
    problem = structural_problem(candidate, reference.shape, dtype)
    if problem:
        where = f"parameter `{parameter}`: " if parameter is not None else ""
        return Comparison(passed=False, status="invalid", message=where + problem, **common)
    kinks = kinks or Kinks.none(reference.shape)
    # NaN in the reference marks entries not checked (layers that screening did not send to a full check).
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
    mismatched = int(np.count_nonzero(judged & over))
    n_unjudgeable = int(np.count_nonzero(kinks.unjudgeable))
    reasons = dict(zip(*np.unique(kinks.reason[kinks.unjudgeable], return_counts=True), strict=True))
    involved = kinks.unjudgeable | two_sided
    locations = np.unique(kinks.kink[involved].reshape(-1, 3), axis=0)
    locations = [list(map(int, k)) for k in locations if k[0] >= 0]
    record = {
        "mismatched": mismatched,
        "judged": int(np.count_nonzero(judged)),
        "unjudgeable": n_unjudgeable,
        "two_sided": int(np.count_nonzero(two_sided)),
        "unjudgeable_reasons": {str(k): int(v) for k, v in reasons.items()},
        "kinks": locations,
        "tolerance_sources": {name: (term_help or TERM_HELP).get(name, "") for name in tolerance.terms},
    }
    if np.any(judged):
        record.update(_extremes(diff, rel, ratio, judged, candidate, reference, tolerance))
        record["per_layer"] = _per_layer(ratio, judged, over)
        record["worst_entries"] = _worst_entries(ratio, judged, candidate, reference, tolerance, kinks)
        record["arrays"] = {
            "ratio": np.where(judged, ratio, np.nan),
            "unjudgeable": kinks.unjudgeable,
            "two_sided": two_sided,
        }
    passed = mismatched == 0 and not (strict and n_unjudgeable) and bool(np.any(judged))
    status = "ok" if passed else "mismatch"
    if not np.any(judged):
        status = "unjudgeable"
    comparison = Comparison(passed=passed, status=status, **common, **record)
    return dataclasses.replace(comparison, message=mismatch_message(comparison))


def structural_problem(candidate: np.ndarray, shape: tuple[int, ...], dtype: str) -> str:
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


def _extremes(diff, rel, ratio, judged, candidate, reference, tolerance):
    def argmax(values):
        masked = np.where(judged, np.nan_to_num(values, nan=0.0, posinf=np.inf), -1.0)
        index = np.unravel_index(int(np.argmax(masked)), masked.shape)
        return tuple(int(i) for i in index), float(masked[index])

    abs_index, abs_value = argmax(diff)
    rel_index, rel_value = argmax(np.where(diff == 0, 0.0, rel))
    worst_index, worst_ratio = argmax(ratio)
    terms = tolerance.at(worst_index)
    return {
        "max_abs_diff": abs_value,
        "max_abs_diff_index": abs_index,
        "max_rel_diff": rel_value,
        "max_rel_diff_index": rel_index,
        "worst_index": worst_index,
        "worst_ratio": worst_ratio,
        "worst_terms": terms,
        "worst_values": {
            "candidate": float(candidate[worst_index]),
            "reference": float(reference[worst_index]),
        },
        "decided_by": max(terms, key=terms.get),
    }


def _per_layer(ratio, judged, over) -> list[dict[str, Any]]:
    """Per layer (leading axis): judged entries, mismatches and the largest difference / tolerance."""
    out = []
    for layer in range(ratio.shape[0] if ratio.ndim else 0):
        seen = judged[layer]
        worst = float(np.max(np.where(seen, ratio[layer], 0.0), initial=0.0))
        out.append(
            {
                "layer": layer,
                "judged": int(np.count_nonzero(seen)),
                "mismatched": int(np.count_nonzero(seen & over[layer])),
                "worst_ratio": worst,
            }
        )
    return out


def _worst_entries(ratio, judged, candidate, reference, tolerance, kinks, count=5):
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
                "kink": kink if kink[0] >= 0 else None,
            }
        )
    return out


def mismatch_message(c: Comparison) -> str:
    """The one fixed message format for a comparison (see README for an example)."""
    if c.status == "invalid":
        return c.message
    lines = []
    if c.status == "unjudgeable":
        of = "" if c.parameter is None else f" of parameter `{c.parameter}`"
        lines.append(f"All {c.total} entries{of} are unjudgeable: nothing was compared! ({_reasons(c)})")
        return "\n".join(lines)
    pct = 100.0 * c.mismatched / max(c.judged, 1)
    # The stack's indices are (layer, row, col); a workload's are those of the named parameter.
    where = "(layer, row, col) " if c.parameter is None else f"parameter `{c.parameter}` index "
    idx = _idx if c.parameter is None else _tuple
    lines.append(
        f"Mismatched elements: {c.mismatched} / {c.judged} ({pct:.1f}%)"
        + (f" in parameter `{c.parameter}`" if c.parameter is not None else "")
        + (f", {c.unjudgeable} unjudgeable ({_reasons(c)})" if c.unjudgeable else "")
    )
    lines.append(f"Greatest absolute difference: {c.max_abs_diff:.6g} at {where}{idx(c.max_abs_diff_index)}")
    lines.append(f"Greatest relative difference: {c.max_rel_diff:.6g} at {where}{idx(c.max_rel_diff_index)}")
    terms = c.worst_terms or {}
    total = sum(terms.values())
    shown = " + ".join(f"{name} {value:.3g}" for name, value in terms.items())
    worst = _idx(c.worst_index) if c.parameter is None else f"`{c.parameter}` {_tuple(c.worst_index)}"
    lines.append(
        f"Worst entry {worst}: {c.backend} {c.worst_values['candidate']:.9g} vs "
        f"{c.reference} {c.worst_values['reference']:.9g}, difference "
        f"{c.worst_ratio:.3g} x the tolerance {total:.3g} = {shown}; decided by {c.decided_by}"
    )
    return "\n".join(lines)


def _idx(index) -> str:
    return "(" + ", ".join(str(i) for i in index) + ")" if index is not None else "-"


def _tuple(index) -> str:
    """A workload parameter's index as Python writes it: ``(7,)``, ``(0, 7)``, ``()``."""
    return str(tuple(index)) if index is not None else "-"


def _reasons(c: Comparison) -> str:
    return ", ".join(f"{n} {r}" for r, n in c.unjudgeable_reasons.items()) or "none"
