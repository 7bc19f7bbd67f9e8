"""The gradient judge's full check: every entry of a candidate's gradient against the reference's, within
its modelled rounding, the reference's error bar, the floor, the user's slack, the underflow bound
and the ReLU kinks judged on both sides (``compare_full``). A reference that answered every entry is
judged so; a screen checks so the layers whose directions disagree.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from crosscheck._compare import terms as _terms
from crosscheck._compare.compare import compare
from crosscheck._compare.constants import UNIT_ROUNDOFF
from crosscheck._compare.dtypes import accumulation
from crosscheck._compare.record import Comparison, Tolerance
from crosscheck._workloads.protocol import Options
from crosscheck._workloads.stack import rounding
from crosscheck._workloads.stack.judge.answers import GradAnswer
from crosscheck._workloads.stack.judge.passes import Passes
from crosscheck._workloads.stack.judge.terms import TERM_HELP


def compare_full(
    passes: Passes,
    options: Options,
    value: np.ndarray,
    name: str,
    reference: str,
    answer: GradAnswer,
    dtype: str,
) -> Comparison:
    """Candidate ``name``'s gradient ``value`` (judged in ``dtype``) entry by entry against the
    reference's ``answer`` (moved to the pattern of ``passes``; NaN entries are not checked)."""
    oracle = passes.answer(answer)
    u = UNIT_ROUNDOFF[accumulation(dtype)]  # a 16-bit dtype's sums are float32's
    own = passes.model(dtype).grad_bound
    floor = _terms.floor(_terms.largest(np.nan_to_num(oracle.value)), u, ulps=_terms.SAFETY_FLOOR_ULPS)
    terms: dict[str, Any] = {
        "rounding": own,
        "reference": oracle.error,
        "floor": floor,
        "slack": np.broadcast_to(options.slack_at(oracle.value), oracle.value.shape),
    }
    flow = passes.underflow(dtype).grad
    if flow.any():  # only a case reaching the underflow range has (or shows) this term
        terms["underflow"] = flow
    kinks, minor = passes.judged_kinks(Tolerance(terms).total(), dtype, oracle)
    found = compare(
        value,
        oracle.value,
        Tolerance({**terms, "kinks": minor}),
        backend=name,
        reference_name=reference,
        dtype=dtype,
        kinks=kinks,
        strict=options.strict,
        keep=options.plot,
        index_names=rounding.INDEX_NAMES,
        term_help=TERM_HELP,
        split=rounding.INDEX_NAMES[0],
    )
    return _with_rounding(passes.range_cause(found, value, dtype), own + floor + flow)


def _with_rounding(comparison: Comparison, bound: np.ndarray) -> Comparison:
    """Keep the candidate's own rounding bound (what a repeated call may differ by) with the record."""
    arrays = {**comparison.arrays, "rounding": {"weights": np.asarray(bound)}}
    return dataclasses.replace(comparison, arrays=arrays)
