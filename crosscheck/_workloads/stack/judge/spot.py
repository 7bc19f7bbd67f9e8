"""A screen's spot check: each screened layer's largest entries, entry by entry.

A direction sums every entry of a layer, so one wrong entry moves it by its own error alone: once the
layer is wide, less than the direction's float32 rounding (one entry wrong by 1e-4 of its value passed
the screen from d = 128). After the screen, each layer it did not check entry by entry has its
``SPOT_ENTRIES`` largest-magnitude entries (of those it judged) compared, one by one, with the oracle's
central differences at exactly those entries (``fd.entries``: the full oracle's per-entry answer, at a
few entries' cost), each within the tolerance the entry-by-entry comparison gives it: the same terms
(modelled rounding, the oracle's error bar, the floor, the user's slack, the underflow bound) and its
kinks judged as that comparison judges them (``judged_kinks``). A candidate whose spot-checked entry
differs fails, with the entry named; the coverage says how many entries were spot-checked.

It takes the passes the candidate is judged on (``Passes``: held at its own ReLU pattern where it is
judged on one), the run's options and the screen's ``Screening``, whose memo keeps the oracle's answer
at each entry (evaluated once for every candidate).
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Any

import numpy as np

from crosscheck._compare import terms
from crosscheck._compare.compare import compare
from crosscheck._compare.constants import UNIT_ROUNDOFF
from crosscheck._compare.dtypes import accumulation
from crosscheck._compare.message import mismatch_message
from crosscheck._compare.record import Comparison, Kinks, Tolerance
from crosscheck._workloads.protocol import Call, Options, Reference
from crosscheck._workloads.stack import rounding
from crosscheck._workloads.stack.judge.answers import GradAnswer
from crosscheck._workloads.stack.judge.passes import Passes
from crosscheck._workloads.stack.judge.screening import Along, Screening
from crosscheck._workloads.stack.judge.terms import TERM_HELP

#: The entries spot-checked in each screened layer: the candidate's largest in magnitude, where a relative
#: error is largest in absolute terms and a direction's tolerance hides it most. Eight, not one: an entry
#: made smaller by its bug, or a bug near (not at) the top, still falls among them. The oracle's cost
#: hardly grows with the number: its perturbed passes read each later layer's weights once per batch row
#: however many entries a layer has (8 take 16 evaluations a layer, about two directions' worth).
SPOT_ENTRIES = 8


def spot_checked(
    passes: Passes,
    options: Options,
    screening: Screening,
    comparison: Comparison,
    candidate: np.ndarray,
    reference: Reference,
    dtype: str,
    call: Call,
) -> Comparison:
    """``comparison`` (a screen's) with each screened layer's largest entries checked one by one."""
    along = screening.along.get(dtype)
    if comparison.status == "invalid" or not isinstance(along, Along):
        return comparison
    layers = [row["layer"] for row in comparison.screening if not row["full_check"]]
    entries = largest(candidate, along.unjudgeable, layers, SPOT_ENTRIES)
    if not len(entries):
        return comparison
    oracle = _oracle_at(passes, screening, entries, call)
    reference.notes["evaluations"] = screening.estimate.evaluations + screening.more_evaluations
    if isinstance(oracle, str):
        message = f"{comparison.message}\nthe reference failed to spot-check single entries: {oracle}"
        return dataclasses.replace(comparison, passed=False, status="invalid", message=message)
    values = candidate[tuple(entries.T)]
    spot = _compared(passes, options, screening, values, oracle, entries, comparison, reference, dtype)
    return _merged(comparison, spot, len(layers))


def largest(candidate: np.ndarray, skip: np.ndarray, layers: list[int], count: int) -> np.ndarray:
    """The ``count`` largest-magnitude entries of each of ``layers`` (largest first; those ``skip``
    marks left out), as ``(S, 3)`` ``(layer, row, col)``."""
    found = []
    # A float32 (or 16-bit) candidate's magnitudes in float32: exact, and half a float64 copy's cost.
    wide = np.float64 if candidate.dtype.itemsize >= 8 else np.float32
    for k in layers:
        magnitude = np.abs(np.asarray(candidate[k], wide)).ravel()
        magnitude[skip[k].ravel()] = -1.0
        take = min(count, int(np.count_nonzero(magnitude >= 0)))
        if not take:
            continue
        top = np.argpartition(magnitude, magnitude.size - take)[-take:]  # no sort of d * d values
        top = top[np.argsort(-magnitude[top], kind="stable")]
        rows, cols = np.unravel_index(top, candidate.shape[1:])
        found.append(np.column_stack([np.full(len(top), k), rows, cols]))
    return np.concatenate(found).astype(np.int64) if found else np.zeros((0, 3), np.int64)


def _oracle_at(passes: Passes, screening: Screening, entries: np.ndarray, call: Call) -> GradAnswer | str:
    """The oracle's answer at ``entries`` (each entry evaluated once for every candidate), moved to the
    candidate's own ReLU pattern where it is judged on one; or why the oracle could not answer."""
    keys = [tuple(int(i) for i in entry) for entry in entries]
    missing = np.array([key for key in keys if key not in screening.spots], np.int64).reshape(-1, 3)
    if len(missing):
        estimate = getattr(screening.oracle, "estimate_entries", None)
        if not callable(estimate):
            return "it has no `estimate_entries`"
        out = call(estimate, passes.weights, passes.x, missing, rounding=passes.model("float64"))
        if out.error:
            return out.error
        est = out.value
        for s, key in enumerate(map(tuple, missing.tolist())):
            screening.spots[key] = (est.value[s], est.error[s], est.kink[s], est.kink_at[s])
        screening.more_evaluations += est.evaluations
    value, error, kink, kink_at = (
        np.array(field) for field in zip(*(screening.spots[k] for k in keys), strict=True)
    )
    pattern = passes.pattern
    if pattern is not None and len(pattern.flipped):
        value, error = value.copy(), error.copy()
        for k in np.unique(entries[:, 0]):
            at = np.flatnonzero(entries[:, 0] == k)
            change, bound = pattern.change(int(k))
            value[at] += change[entries[at, 1], entries[at, 2]]
            error[at] += bound[entries[at, 1], entries[at, 2]]
    return GradAnswer(value, error, kink, kink_at)


def _compared(
    passes: Passes,
    options: Options,
    screening: Screening,
    values: np.ndarray,
    oracle: GradAnswer,
    entries: np.ndarray,
    comparison: Comparison,
    reference: Reference,
    dtype: str,
) -> Comparison:
    """The spot-checked entries against the oracle's, within the terms ``compare_full`` gives them
    (a record of ``S`` entries, each index said as its ``(layer, row, col)``)."""
    where = tuple(entries.T)
    u = UNIT_ROUNDOFF[accumulation(dtype)]
    named: dict[str, Any] = {
        "rounding": terms.modelled(passes.model(dtype).grad_sigma[where]),
        "reference": oracle.error,
        "floor": terms.floor(terms.largest(oracle.value), u, ulps=terms.SAFETY_FLOOR_ULPS),
        "slack": np.broadcast_to(options.slack_at(oracle.value), oracle.value.shape),
    }
    flow = passes.underflow(dtype).grad
    if flow.any():
        named["underflow"] = flow[where]
    kinks, minor = _kinks(passes, screening, Tolerance(named).total(), dtype, oracle, entries)
    found = compare(
        values,
        oracle.value,
        Tolerance({**named, "kinks": minor}),
        backend=comparison.backend,
        reference_name=reference.name,
        dtype=dtype,
        kinks=kinks,
        strict=options.strict,
        term_help=TERM_HELP,
    )
    return _indexed(found, entries)


def _kinks(
    passes: Passes,
    screening: Screening,
    tol: np.ndarray,
    dtype: str,
    oracle: GradAnswer,
    entries: np.ndarray,
) -> tuple[Kinks, np.ndarray]:
    """The kinks at ``entries`` as the full check judges them, for their tolerances ``tol`` (each
    entry's judgement depends on its own tolerance alone: elsewhere an infinite one counts nothing).
    Made once for every candidate that spot-checks the same entries with the same tolerances on the
    same pattern; the stack-sized judgement is dropped once these entries have theirs."""
    pattern = None if passes.pattern is None else passes.pattern.flipped.tobytes()  # its own bounds
    key = ("kinks", dtype, pattern, entries.tobytes(), np.asarray(tol, np.float64).tobytes())
    if key not in screening.spots:
        threshold = np.full(passes.weights.shape, np.inf)
        threshold[tuple(entries.T)] = tol
        screening.spots[key] = passes.judged_kinks(threshold, dtype, oracle, at=entries)
        del threshold
        passes.forget_kinks(dtype)
    return screening.spots[key]


def _indexed(found: Comparison, entries: np.ndarray) -> Comparison:
    """``found`` (of ``S`` spot-checked entries) with each index the entry's ``(layer, row, col)``."""

    def index(at: Any) -> tuple[int, ...] | None:
        return None if at is None else tuple(int(i) for i in entries[at[0]])

    worst = [{**entry, "index": list(index(entry["index"]) or ())} for entry in found.worst_entries]
    found = dataclasses.replace(
        found,
        index_names=list(rounding.INDEX_NAMES),
        max_abs_diff_index=index(found.max_abs_diff_index),
        max_rel_diff_index=index(found.max_rel_diff_index),
        worst_index=index(found.worst_index),
        worst_entries=worst,
    )
    return dataclasses.replace(found, message=mismatch_message(found))


def _merged(comparison: Comparison, spot: Comparison, layers: int) -> Comparison:
    """The screen's ``comparison`` and its ``spot`` check as one record: the counts summed, the verdict
    both's, the coverage and the message saying what the spot check did (and, failing, what it found);
    the worst entry the spot check's where it is worse."""
    unjudged = f", {spot.unjudgeable} unjudgeable" if spot.unjudgeable else ""
    upto = "up to " if spot.total < SPOT_ENTRIES * layers else ""  # a layer with fewer judgeable ones
    said = (
        f"; spot-checked: {spot.total} entries ({upto}the {SPOT_ENTRIES} largest of each of {layers} "
        f"screened layers){unjudged}"
    )
    coverage = comparison.coverage + said
    message = comparison.message
    if message.startswith(comparison.coverage):
        message = coverage + message[len(comparison.coverage) :]
    failed = spot.status == "mismatch"
    if failed:
        message += f"\nSpot check: {spot.message}"
    reasons = collections.Counter(comparison.unjudgeable_reasons) + collections.Counter(
        spot.unjudgeable_reasons
    )
    merged = dataclasses.replace(
        comparison,
        passed=comparison.passed and not failed,
        status="mismatch" if failed else comparison.status,
        mismatched=comparison.mismatched + spot.mismatched,
        judged=comparison.judged + spot.judged,
        unjudgeable=comparison.unjudgeable + spot.unjudgeable,
        two_sided=comparison.two_sided + spot.two_sided,
        unjudgeable_reasons=dict(reasons),
        kinks=comparison.kinks + [k for k in spot.kinks if k not in comparison.kinks],
        coverage=coverage,
        message=message,
    )
    if spot.worst_ratio is None or (comparison.worst_ratio or 0.0) >= spot.worst_ratio:
        return merged
    extremes = ("max_abs_diff", "max_rel_diff", "worst_index", "worst_ratio", "worst_terms", "worst_values")
    names = [*extremes, "max_abs_diff_index", "max_rel_diff_index", "decided_by", "worst_entries"]
    sources = {**spot.tolerance_sources, **comparison.tolerance_sources}
    return dataclasses.replace(
        merged, tolerance_sources=sources, **{name: getattr(spot, name) for name in names}
    )
