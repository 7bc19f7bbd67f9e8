"""The gradient judge of a user's ``Workload`` (see ``generic`` for the tolerance's terms)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from crosscheck._compare.compare import Comparison, Kinks
from crosscheck._errors import describe, reraise_user_interrupt
from crosscheck._workloads.base import Workload, as_dtype
from crosscheck._workloads.generic import (
    FALLBACK_ULPS,
    OTHER_DTYPE,
    SAFETY,
    UNIT_ROUNDOFF,
    Answer,
    WorkloadOracle,
    compare_parameters,
    rms,
)
from crosscheck._workloads.oracle import WorkloadEstimate, estimate
from crosscheck._workloads.protocol import Call, Options, Point, Reference


class GenericJudge:
    """Each parameter's gradient of a ``Workload`` at one point."""

    signature = "grad(params, inputs)"

    def __init__(self, workload: Workload, point: Point, options: Options) -> None:
        self.workload, self.point, self.options = workload, point, options
        self.dtype = point.dtype
        self.loss, source = _oracle_function(workload, point.params, point.inputs)
        point.case["oracle_differentiates"] = source
        self.notes: dict[str, dict[str, Any]] = {}

    def evaluate(self, backend: Any, call: Call) -> Any:
        return self._grad(backend, call, self.point.params, self.point.inputs)

    def _grad(self, backend: Any, call: Call, params: dict, inputs: dict) -> Any:
        # Fresh dicts: a backend that adds or drops keys changes nothing the next one sees.
        return call(backend.grad, dict(params), dict(inputs), convert="arrays")

    def reference(self, backend: Any, call: Call) -> Any:
        if isinstance(backend, WorkloadOracle):
            params = {k: v.astype(np.float64) for k, v in self.point.params.items()}
            out = call(estimate, self.loss, params)
            if out.error:
                return dataclasses.replace(out, error=f"finite differences of the loss failed: {out.error}")
            notes = {
                "evaluations": out.value.evaluations,
                "differentiates": self.point.case["oracle_differentiates"],
            }
            return dataclasses.replace(
                out, value=Reference(out.value.value, "float64", notes, _answer(out.value))
            )
        out = self.evaluate(backend, call)
        if out.error:
            return out
        value = out.value
        problems = [
            k
            for k in self.point.params
            if k not in value
            or value[k].shape != self.point.params[k].shape
            or not np.all(np.isfinite(value[k]))
        ]
        if problems:
            error = f"reference gradient of `{problems[0]}` is missing, of the wrong shape or not finite"
            return dataclasses.replace(out, value=None, error=error)
        rounding, how = self.rounding(backend, value, call)
        ref_value = {k: np.asarray(value[k], dtype=np.float64) for k in self.point.params}
        kinks = {k: Kinks.none(v.shape) for k, v in self.point.params.items()}
        reference = Reference(
            ref_value, _dtypes(value), {"rounding": how}, Answer(ref_value, rounding, kinks)
        )
        return dataclasses.replace(out, value=reference)

    def compare(
        self, backend: Any, value: dict[str, np.ndarray], name: str, reference: Reference, call: Call
    ) -> list[Comparison]:
        rounding, how = self.rounding(backend, value, call)
        self.notes[name] = {"rounding": how}
        return compare_parameters(
            value, rounding, name, reference, workload=self.workload, dtype=self.dtype, options=self.options
        )

    def rounding(self, backend: Any, value: dict[str, np.ndarray], call: Call) -> tuple[dict, str]:
        """The ``rounding`` term of every parameter, and how it was obtained (see ``generic``)."""
        other = OTHER_DTYPE[self.dtype]
        params, inputs = as_dtype(self.point.params, other), as_dtype(self.point.inputs, other)
        again = self._grad(backend, call, params, inputs).value
        usable = again is not None and all(
            k in again and again[k].shape == v.shape and again[k].dtype.name == other and k in value
            for k, v in self.point.params.items()
        )
        scale = 1.0 if self.dtype == "float32" else UNIT_ROUNDOFF["float64"] / UNIT_ROUNDOFF["float32"]
        out = {}
        for k in self.point.params:
            if usable:
                with np.errstate(invalid="ignore"):
                    d = scale * np.abs(np.asarray(value[k], np.float64) - again[k].astype(np.float64))
            else:
                mine = np.abs(np.asarray(value.get(k, 0.0), np.float64))
                d = (
                    FALLBACK_ULPS
                    * UNIT_ROUNDOFF[self.dtype]
                    * np.broadcast_to(mine, self.point.params[k].shape)
                )
            d = np.nan_to_num(d, nan=0.0, posinf=0.0)
            out[k] = SAFETY * (d + rms(d))
        how = (
            f"measured: re-run in {other}"
            if usable
            else f"no usable re-run in {other}: {FALLBACK_ULPS:g} unit roundoffs of |gradient| + RMS"
        )
        return out, how

    def extras(self, reference: Reference | None) -> dict[str, Any]:
        return {"quantity": "grad"}


def _dtypes(value: dict[str, np.ndarray]) -> str | None:
    return ",".join(sorted({v.dtype.name for v in value.values()})) or None


def _answer(est: WorkloadEstimate) -> Answer:
    kinks = {}
    for k, unjudgeable in est.unjudgeable.items():
        none = Kinks.none(unjudgeable.shape)
        kinks[k] = dataclasses.replace(none, unjudgeable=unjudgeable, reason=est.reason[k])
    return Answer(est.value, est.error, kinks)


def _oracle_function(workload: Workload, params: dict, inputs: dict) -> tuple[Callable, str]:
    """The float64 function the oracle differentiates, and which it is (``reference`` or ``surrogate``)."""
    p64, i64 = as_dtype(params, "float64"), as_dtype(inputs, "float64")
    _finite_loss(workload, "reference", lambda: workload.reference(dict(p64), i64))
    if workload.surrogate is None:
        return (lambda p: workload.reference(p, i64)), "reference"
    try:
        built = workload.surrogate({k: v.copy() for k, v in p64.items()}, i64)
    except BaseException as exc:
        reraise_user_interrupt(exc)
        raise ValueError(
            f"workload `{workload.name}`: `surrogate(params, inputs)` raised {describe(exc)}"
        ) from exc
    if not callable(built):
        raise ValueError(
            f"workload `{workload.name}`: `surrogate(params, inputs)` must return a function of the "
            f"parameters, found {type(built).__name__}."
        )
    _finite_loss(workload, "surrogate", lambda: built(dict(p64)))
    return built, "surrogate (built at the base point: the gradient the implementations compute)"


def _finite_loss(workload: Workload, what: str, call: Callable[[], Any]) -> float:
    """The user's loss at the case's point, which must be a finite float (else a ``ValueError``)."""
    try:
        value = call()
    except BaseException as exc:  # the workload's own code: its sys.exit is a bad workload, not the end
        reraise_user_interrupt(exc)
        raise ValueError(
            f"workload `{workload.name}`: the `{what}` loss raised at the case's point: {describe(exc)}"
        ) from exc
    try:
        number = float(value)
    except (TypeError, ValueError) as exc:
        raise ValueError(
            f"workload `{workload.name}`: the `{what}` loss must return a float, found "
            f"{type(value).__name__} {value!r:.60}."
        ) from exc
    if not math.isfinite(number):
        raise ValueError(
            f"workload `{workload.name}`: the `{what}` loss must be finite at the case's point, "
            f"found {number}."
        )
    return number
