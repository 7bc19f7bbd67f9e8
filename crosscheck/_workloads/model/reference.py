"""The model judge's reference: the oracle (``WorkloadOracle``: differences of the workload's NumPy
reference, when it has one; the candidates' own losses are differenced when each is compared) or a
backend, whose gradient is checked (every parameter there, in shape, finite), its rounding measured, and
handed on as the answer every candidate is compared with (``BackendAnswer``, the ``Reference``'s data).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import numpy as np

from crosscheck._backends import ORACLE
from crosscheck._compare import low
from crosscheck._compare.dtypes import is_low
from crosscheck._compare.record import Kinks
from crosscheck._types import Loaded
from crosscheck._workloads.model.compare import Answer
from crosscheck._workloads.model.findings import Judging
from crosscheck._workloads.model.oracle.function import Function, difference
from crosscheck._workloads.model.oracle.one_thread import threads_note
from crosscheck._workloads.model.rounding import Rounding
from crosscheck._workloads.protocol import Call, Outcome, Reference


class WorkloadOracle:
    """The reference ``numpy-fd`` of a workload: finite differences of its float64 loss."""

    name = ORACLE

    def info(self) -> dict[str, str]:
        return {"framework": "numpy + scipy.differentiate", "version": "", "device": "cpu"}


@dataclasses.dataclass(frozen=True)
class BackendAnswer:
    """A backend as reference, as the ``Reference``'s data: the ``answer`` every candidate is compared
    with (its gradient, its measured rounding as error, no kink), and the ``backend`` with that
    ``rounding`` (the zero checks difference its own loss beside each candidate's)."""

    answer: Answer
    backend: Loaded
    rounding: Rounding


def by_oracle(judge: Judging, numpy: Function | None, call: Call) -> Outcome:
    """The oracle's reference: differences of the NumPy reference ``numpy`` (the anchor of every
    candidate's "same function", ``findings.anchor``), or nothing yet without one."""
    notes: dict[str, Any] = {
        "mode": judge.differencing.mode,
        "threads": threads_note(sum(int(np.size(v)) for v in judge.point.params.values())),
        "differentiates": judge.point.case["oracle_differentiates"],
    }
    start = time.perf_counter()
    value = None
    if numpy is not None:
        found = difference(numpy, judge.point, judge.differencing, call, judge.progress)
        if isinstance(found, str):
            return call.failure(f"finite differences of the loss failed: {found}")
        judge.findings.anchor = found
        notes["evaluations"] = found.evaluations
        value = found.entries.value if found.entries is not None else None
    reference = Reference(value, "float64", notes, judge.findings.anchor)
    return dataclasses.replace(
        call.failure(""), value=reference, error=None, seconds=time.perf_counter() - start
    )


def by_backend(judge: Judging, backend: Loaded, out: Outcome, call: Call) -> Outcome:
    """``backend``'s gradient ``out`` as the reference (``BackendAnswer``), or why it cannot be one: a
    parameter missing, of the wrong shape or not finite (a 16-bit range lost, said), or a rounding beyond
    what float32 permits (a reference below float32 precision cannot judge anyone)."""
    if out.error:
        return out
    value, shapes, dtype = out.value, judge.shapes, judge.dtype
    problems = [
        k
        for k in shapes
        if k not in value or value[k].shape != shapes[k] or not np.all(np.isfinite(value[k]))
    ]
    if problems:
        error = f"reference gradient of `{problems[0]}` is missing, of the wrong shape or not finite"
        if is_low(dtype) and problems[0] in value:  # a 16-bit range lost: said as what it is
            lost = judge.rounding(backend, value, "the reference", call).limits.get(problems[0])
            error += f" ({lost})" if lost else ""
        return dataclasses.replace(out, value=None, error=error)
    rounding = judge.rounding(backend, value, "the reference", call)
    name = getattr(backend, "name", "the reference")
    if rounding.excess:
        return dataclasses.replace(out, value=None, error=rounding.excess[0].says(name, dtype))
    # The backend's own arrays, kept as they came (a float32 gradient stays 4 bytes an entry): each
    # use widens one tensor at a time (``compare.entries``, ``zeros``), exactly.
    ref_value = {k: value[k] for k in shapes}
    judge.findings.reference_gradient = ref_value
    answer = Answer(ref_value, rounding.term, {k: Kinks.none(s) for k, s in shapes.items()})
    notes: dict[str, Any] = {"rounding": rounding.how}
    if rounding.wide_only:  # a 16-bit reference that computed in float32, named
        notes["rounding"] += f"; {low.wide_only(name, dtype)}"
    if rounding.used is not None:  # how much of what its dtype permits its rounding used
        notes["rounding_of_permitted"] = round(rounding.used, 4)
    data = BackendAnswer(answer, backend, rounding)
    return dataclasses.replace(out, value=Reference(ref_value, _dtypes(value), notes, data))


def _dtypes(value: dict[str, np.ndarray]) -> str | None:
    return ",".join(sorted({v.dtype.name for v in value.values()})) or None
