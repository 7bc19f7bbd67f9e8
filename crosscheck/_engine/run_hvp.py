"""The HVP driver: every candidate's ``hvp(weights, x, v)`` against the oracle's, entry by entry.

Same comparison, report and tolerance machinery as gradients (``crosscheck._compare.compare``); the quantity,
the direction and the tolerance terms are what differ (see ``crosscheck._workloads.stack.hvp``).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import numpy as np

from crosscheck._compare.compare import Comparison, Kinks, Tolerance, compare
from crosscheck._engine.candidates import run_candidates
from crosscheck._registry import Backend, BackendUnavailable, backend_info, load_backend
from crosscheck._report.environment import environment
from crosscheck._report.report import BackendResult, Report
from crosscheck._workloads.stack import hvp as _hvp
from crosscheck._workloads.stack import model as _stack

NO_HVP = "has no `hvp(weights, x, v)` method, so it cannot be checked with quantity 'hvp'"


@dataclasses.dataclass
class HvpDriver:
    """One HVP run over fixed inputs; ``run(specs, reference)`` returns the ``Report``."""

    weights: np.ndarray
    x: np.ndarray
    case: dict[str, Any]
    seed: int
    rtol: float | None = None
    atol: float | None = None
    strict: bool = False

    def __post_init__(self) -> None:
        self.v = _hvp.direction(self.weights, self.seed)
        self.pristine = (self.weights.copy(), self.x.copy(), self.v.copy())
        self.dtype = self.weights.dtype.name

    def run(self, specs: list[Any], reference_spec: Any, explicit: bool) -> Report:
        results: dict[str, BackendResult] = {}
        values: dict[str, np.ndarray] = {}
        ref_backend, ref_result = self._load(reference_spec, True)
        ref = None
        if ref_backend is not None:
            ref, ref_result = self._reference(ref_backend, ref_result)
        results[ref_result.name] = ref_result
        if ref is not None:
            values[ref_result.name] = ref[0]
        comparisons: list[Comparison] = []

        def evaluate(backend: Backend, result: BackendResult, name: str) -> BackendResult:
            value, result = self._candidate(backend, result)
            if value is not None:
                values[name] = value
                comparisons.append(self._compare(backend, value, result, ref, ref_result.name))
            return result

        run_candidates(
            specs,
            lambda spec: self._load(spec, explicit),
            evaluate,
            reference_ran=ref is not None,
            results=results,
        )
        record = _hvp.direction_record(self.v, self.seed)
        if ref is not None:
            record.update(ref[3])
        return Report(
            case=self.case,
            backends=results,
            comparisons=comparisons,
            reference=ref_result.name,
            strict=self.strict,
            environment=environment(),
            inputs=(self.weights.copy(), self.x.copy()),
            gradients=values,
            quantity="hvp",
            direction=record,
        )

    def _load(self, spec: Any, explicit: bool) -> tuple[Backend | None, BackendResult]:
        name = spec if isinstance(spec, str) else getattr(spec, "name", getattr(spec, "__name__", "?"))
        try:
            backend = load_backend(spec)
        except BackendUnavailable as exc:
            return None, BackendResult(
                name=str(name), status="unavailable", error=str(exc), required=explicit
            )
        result = BackendResult(
            name=str(backend.name), status="pending", required=explicit, info=backend_info(backend)
        )
        return backend, result

    def _timed(self, fn, result: BackendResult, *args):
        start = time.perf_counter()
        try:
            value = fn(*args)
        except Exception as exc:
            self._restore()
            return None, dataclasses.replace(result, status="failed", error=f"{type(exc).__name__}: {exc}")
        elapsed = time.perf_counter() - start
        if self._restore():
            error = "modified its inputs (`weights`, `x` or `v`); backends must not write to them"
            return None, dataclasses.replace(result, status="failed", seconds=elapsed, error=error)
        return value, dataclasses.replace(result, status="ok", seconds=elapsed)

    def _reference(self, backend: Backend, result: BackendResult):
        """``((value, error, kinks, notes), result)``, or ``(None, result)`` when it failed."""
        result = dataclasses.replace(result, role="reference")
        if callable(getattr(backend, "hvp_estimate", None)):
            est, result = self._timed(backend.hvp_estimate, result, self.weights, self.x, self.v)
            if est is None:
                return None, result
            notes = {
                "kink_radius": est.radius,
                "kink_radius_at": list(est.kink_at),
                "nodes": len(est.nodes),
                "largest_node": float(np.max(np.abs(est.nodes), initial=0.0)),
                "evaluations": est.evaluations,
            }
            kinks = Kinks(
                est.kink,
                np.where(est.kink, est.reason, "").astype(object),
                np.broadcast_to(np.array(est.kink_at), est.kink.shape + (3,)).copy(),
                np.full(est.kink.shape, np.nan),
            )
            result = dataclasses.replace(result, dtype="float64", notes={**result.notes, **notes})
            return (np.nan_to_num(est.value), est.error, kinks, {"oracle": notes}), result
        if not callable(getattr(backend, "hvp", None)):
            return None, dataclasses.replace(result, status="failed", error=NO_HVP)
        value, result = self._candidate(backend, result)
        if value is None:
            return None, result
        error, _ = _hvp.rerun_term(backend, self.weights, self.x, self.v, value)
        return (value.astype(np.float64), error, Kinks.none(value.shape), {}), result

    def _candidate(self, backend: Backend, result: BackendResult):
        if not callable(getattr(backend, "hvp", None)):
            status = "failed" if result.required else "skipped"
            return None, dataclasses.replace(result, status=status, error=NO_HVP)
        value, result = self._timed(backend.hvp, result, self.weights, self.x, self.v)
        if value is None:
            return None, result
        value = np.asarray(value)
        return value, dataclasses.replace(result, dtype=value.dtype.name)

    def _compare(self, backend, value, result, ref, ref_name) -> Comparison:
        ref_value, ref_error, kinks, _ = ref
        try:
            rerun, note = _hvp.rerun_term(backend, self.weights, self.x, self.v, value)
        except Exception as exc:  # the re-run sizes a tolerance: failing it must not fail the run
            rerun, note = np.zeros(value.shape), f"re-run failed: {type(exc).__name__}: {exc}"
        self._restore()
        u = _stack.UNIT_ROUNDOFF[self.dtype]
        slack = 0.0 if self.rtol is None else self.atol + self.rtol * np.abs(ref_value)
        tolerance = Tolerance(
            {
                "rerun": rerun,
                "reference": ref_error,
                "floor": _stack.SAFETY * u * float(np.max(np.abs(ref_value), initial=0.0)),
                "slack": np.broadcast_to(slack, ref_value.shape),
            }
        )
        comparison = compare(
            value,
            ref_value,
            tolerance,
            backend=result.name,
            reference_name=ref_name,
            # A backend may compute in another precision on purpose (the oracle: float64).
            dtype=getattr(backend, "output_dtype", None) or self.dtype,
            kinks=kinks,
            strict=self.strict,
        )
        sources = {**comparison.tolerance_sources, "rerun": f"{_hvp.RERUN_HELP} ({note})"}
        return dataclasses.replace(comparison, tolerance_sources=sources)

    def _restore(self) -> bool:
        modified = False
        for live, pristine in zip((self.weights, self.x, self.v), self.pristine, strict=True):
            if not np.array_equal(live, pristine):
                modified = True
                live[...] = pristine
        return modified
