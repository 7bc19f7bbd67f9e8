"""What the model oracle will cost, estimated before it runs: said on the command line before a long
run (2 000 one-element tensors screened took 400 s with nothing printed).

``estimate`` is the one place that turns the oracle's differencing into a count of loss evaluations: update it
with the oracle (``crosscheck._workloads.model.oracle``) when that changes how many evaluations it makes.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import numpy as np

from crosscheck._compare.dtypes import as_dtype
from crosscheck._workloads.model.oracle.directions import EVALUATIONS_PER_DIRECTION
from crosscheck._workloads.model.oracle.entries import EVALUATIONS_PER_ENTRY, read_only
from crosscheck._workloads.model.oracle.function import Function

#: A run estimated to take longer than this (or, with no time per evaluation, to make more
#: evaluations than ``LONG_EVALUATIONS``) says its estimate before it starts.
LONG_SECONDS = 30.0
LONG_EVALUATIONS = 100_000


@dataclasses.dataclass(frozen=True)
class Cost:
    """The oracle's planned work: ``tensors`` and ``entries`` of the parameters, ``mode`` (full or
    screen), ``evaluations`` of each function it differences, ``functions`` differenced, and
    ``seconds`` roughly (None: no loss was timed)."""

    tensors: int
    entries: int
    mode: str
    evaluations: int
    functions: int
    seconds: float | None

    @property
    def long(self) -> bool:
        if self.seconds is not None:
            return self.seconds > LONG_SECONDS
        return self.evaluations * self.functions > LONG_EVALUATIONS

    def line(self) -> str:
        """The estimate in a line: tensors, planned evaluations, rough time."""
        how = "entry by entry" if self.mode == "full" else "along random directions"
        time = "" if self.seconds is None else f", roughly {_duration(self.seconds)} here"
        return (
            f"the oracle differences {self.tensors} tensors ({self.entries} entries) {how}: about "
            f"{self.evaluations:,} loss evaluations for each of {self.functions} functions{time} "
            "(--reference torch or another backend compares without the oracle)"
        )


def estimate(
    chosen: Any, params: dict[str, np.ndarray], functions: int, per_evaluation: float | None
) -> Cost:
    """The cost of differencing ``functions`` functions of ``params`` as ``chosen`` (a
    ``oracle.function.Differencing``) says, each evaluation taking about ``per_evaluation`` seconds
    (None: unknown)."""
    entries = sum(int(v.size) for v in params.values())
    if chosen.mode == "full":
        evaluations = EVALUATIONS_PER_ENTRY * entries
    else:  # screening one group of every tensor (halved groups and entries where a direction fails on top)
        evaluations = EVALUATIONS_PER_DIRECTION * chosen.per_parameter
    total = None if per_evaluation is None else per_evaluation * evaluations * functions
    return Cost(len(params), entries, chosen.mode, evaluations, functions, total)


def seconds_per_evaluation(function: Function, params: dict[str, np.ndarray]) -> float | None:
    """One evaluation of ``function`` at ``params``, timed: a second one, after the first that built it
    (a first call pays its imports, ``from scipy.special import erf``: 0.6 s at load 14, which made a
    23 s run announce "roughly 12 min"). None where it raises this time."""
    arrays = read_only(as_dtype(params, "float64"))
    start = time.perf_counter()
    try:
        function.fn(arrays)
    except Exception:  # it passed once; the oracle's own calls will say what is wrong
        return None
    return time.perf_counter() - start


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
