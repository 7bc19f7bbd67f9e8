"""The stack's Hessian-vector product judge: every candidate's ``hvp(weights, x, v)`` against the
oracle's (``model``-free: see ``hvp``), entry by entry or screened along random directions
(``hvp_screen``), with the candidate's rounding measured by a re-run in the other precision
(``hvp.rerun_term``)."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from crosscheck._compare import terms as _terms
from crosscheck._compare.compare import compare
from crosscheck._compare.constants import OTHER_DTYPE, UNIT_ROUNDOFF
from crosscheck._compare.record import Comparison, Kinks, Tolerance
from crosscheck._types import Loaded
from crosscheck._workloads.protocol import Call, Options, Outcome, Point, Reference
from crosscheck._workloads.stack import rounding
from crosscheck._workloads.stack.judge import hvp_screen as _screen
from crosscheck._workloads.stack.judge.answers import HvpAnswer, declared_dtype, oracle_answer
from crosscheck._workloads.stack.judge.screening import Screening
from crosscheck._workloads.stack.judge.terms import TERM_HELP
from crosscheck._workloads.stack.judge.verdict import oracle_section
from crosscheck._workloads.stack.oracle import hvp as _hvp


class StackHvpJudge:
    """``H v`` of the stack's loss with respect to the weights, along the case's seeded direction."""

    signature = "hvp(weights, x, v)"

    def __init__(self, point: Point, options: Options) -> None:
        if options.explain:
            raise ValueError("`explain` is not available with quantity 'hvp'.")
        if options.oracle.mode == "outputs":  # the layers' outputs give the gradient, not H v
            raise ValueError(
                "`oracle_mode` 'outputs' judges the gradient; quantity 'hvp' takes full or screen."
            )
        if point.dtype not in UNIT_ROUNDOFF:  # its rerun term re-runs in the other of two
            raise ValueError(
                f"quantity 'hvp' is judged in float32 and float64; found dtype {point.dtype!r} "
                "(a 16-bit case checks the gradient)."
            )
        self.weights, self.x, self.options = point.params["weights"], point.inputs["x"], options
        # User arrays have no seed: their direction comes from seed 0.
        self.seed = options.seed if point.case.get("source") != "user arrays" else 0
        self.v = point.extra.setdefault("v", _hvp.direction(self.weights, self.seed))
        self.dtype = point.dtype
        self.notes: dict[str, dict[str, Any]] = {}
        #: The screening strategy, when the reference screened (``screening.Screening``).
        self.screening: Screening | None = None
        #: Each screened candidate's entries judged one by one, of its total (``verdict.screened``).
        self.screened: dict[str, tuple[int, int]] = {}

    def evaluate(self, backend: Loaded, call: Call) -> Outcome:
        return self._hvp(backend, call, self.dtype)

    def _hvp(self, backend: Loaded, call: Call, dtype: str) -> Outcome:
        _, problem = declared_dtype(backend, self.dtype)
        if problem:
            return call.failure(problem)
        args = [a if a.dtype.name == dtype else a.astype(dtype) for a in (self.weights, self.x, self.v)]
        out = call(backend.hvp, *args, convert="array")
        return out if out.error else dataclasses.replace(out, value={"weights": out.value})

    def reference(self, backend: Loaded, call: Call) -> Outcome:
        if _screen.mode(self, backend) == "screen":
            out, screening = _screen.screen_reference(self, backend, call)
            self.screening = screening or self.screening
            return out
        if callable(getattr(backend, "hvp_estimate", None)):
            out = call(backend.hvp_estimate, self.weights, self.x, self.v)
            if out.error:
                return out
            return dataclasses.replace(out, value=self._oracle_reference(out.value))
        if not callable(getattr(backend, "hvp", None)):
            return call.failure(f"has no `{self.signature}` method, so it cannot be the reference")
        out = self.evaluate(backend, call)
        if out.error:
            return out
        value = out.value["weights"]
        error, _ = self._rerun(backend, call, value)
        answer = HvpAnswer(value.astype(np.float64), error, Kinks.none(value.shape, len(rounding.KINK_NAMES)))
        return dataclasses.replace(out, value=Reference({"weights": value}, value.dtype.name, {}, answer))

    def _oracle_reference(self, est: Any) -> Reference:
        notes = {
            "kink_radius": est.radius,
            "kink_radius_at": list(est.kink_at),
            "nodes": len(est.nodes),
            "largest_node": float(np.max(np.abs(est.nodes), initial=0.0)),
            "evaluations": est.evaluations,
        }
        answer = oracle_answer(est)
        answer = dataclasses.replace(answer, value=np.nan_to_num(answer.value))
        return Reference({"weights": answer.value}, "float64", notes, answer)

    def rerun(self, backend: Loaded, call: Call) -> tuple[np.ndarray | None, str]:
        """The candidate's HVP re-run in the other precision (None, and why, when that failed)."""
        out = self._hvp(backend, call, OTHER_DTYPE[self.dtype])
        return (None, f"re-run failed: {out.error}") if out.error else (out.value["weights"], "")

    def _rerun(self, backend: Loaded, call: Call, value: np.ndarray) -> tuple[np.ndarray, str]:
        """The ``rerun`` term: the candidate re-run in the other precision (see ``hvp.rerun_term``)."""
        again, problem = self.rerun(backend, call)
        if again is None:
            return np.zeros(value.shape), problem
        return _hvp.rerun_term(value, again, self.dtype)

    def compare(
        self, backend: Loaded, value: dict[str, np.ndarray], name: str, reference: Reference, call: Call
    ) -> list[Comparison]:
        candidate = value["weights"]
        if self.screening is not None:
            found = _screen.compare_screened(self, self.screening, backend, candidate, name, reference, call)
            self.screened[name] = (found.judged, found.total)
            return [found]
        rerun, note = self._rerun(backend, call, candidate)
        return [self.compare_full(backend, candidate, name, reference, rerun, note)]

    def compare_full(
        self,
        backend: Loaded,
        candidate: np.ndarray,
        name: str,
        reference: Reference,
        rerun: np.ndarray,
        note: str,
    ) -> Comparison:
        """Every entry (NaN reference entries are not checked) within the re-run's measured rounding,
        the oracle's error bar, the floor and the user's slack."""
        answer: HvpAnswer = reference.data
        u = UNIT_ROUNDOFF[self.dtype]
        finite = answer.value[np.isfinite(answer.value)]
        floor = _terms.floor(_terms.largest(finite), u, ulps=_terms.SAFETY_FLOOR_ULPS)
        terms: dict[str, Any] = {
            "rerun": rerun,
            "reference": answer.error,
            "floor": floor,
            "slack": np.broadcast_to(self.options.slack_at(answer.value), answer.value.shape),
        }
        dtype, _ = declared_dtype(backend, self.dtype)
        found = compare(
            candidate,
            answer.value,
            Tolerance(terms),
            backend=name,
            reference_name=reference.name,
            dtype=dtype,
            kinks=answer.kinks,
            strict=self.options.strict,
            keep=self.options.plot,
            index_names=rounding.INDEX_NAMES,
            term_help={**TERM_HELP, "rerun": f"{_hvp.RERUN_HELP} ({note})"},
            split=rounding.INDEX_NAMES[0],
        )
        arrays = {**found.arrays, "rounding": {"weights": rerun + floor}}
        return dataclasses.replace(found, arrays=arrays)

    def extras(self, reference: Reference | None) -> dict[str, Any]:
        record = _hvp.direction_record(self.v, self.seed)
        if reference is not None and reference.dtype == "float64" and reference.notes:
            record["oracle"] = dict(reference.notes)
        extras: dict[str, Any] = {"quantity": "hvp", "direction": record}
        if self.screening is not None:
            directions = self.options.oracle.directions
            extras["oracle"] = oracle_section("screen", self.screened, directions)
        return extras
