"""The stack's gradient judge: the oracle (every entry, or screened), modelled rounding, kinks judged on
both sides, and (with ``explain``) forward localization and classification by controlled re-runs.

Every backend call goes through the engine's guarded ``call``; the numerics are ``model``'s.
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any

import numpy as np

from crosscheck._compare import constants as _constants
from crosscheck._compare import low as _low
from crosscheck._compare import terms as _terms
from crosscheck._compare.compare import compare
from crosscheck._compare.constants import ALL_DTYPES
from crosscheck._compare.device import arithmetic, scale
from crosscheck._compare.dtypes import accumulation, is_low
from crosscheck._compare.record import Comparison, Kinks, Tolerance
from crosscheck._records import Oracle
from crosscheck._report.report import Verdict
from crosscheck._workloads.protocol import Call, Options, Outcome, Point, Reference
from crosscheck._workloads.stack import forward as _forward
from crosscheck._workloads.stack import kinks as _kinks
from crosscheck._workloads.stack import pattern as _pattern
from crosscheck._workloads.stack import rounding
from crosscheck._workloads.stack import underflow as _underflow
from crosscheck._workloads.stack.explain import SECTION, classify, forward_layers, verdict
from crosscheck._workloads.stack.judge import cost
from crosscheck._workloads.stack.judge import pattern as _patterned
from crosscheck._workloads.stack.judge import screen as _screen
from crosscheck._workloads.stack.judge import spot as _spot
from crosscheck._workloads.stack.judge.answers import GradAnswer, declared_dtype
from crosscheck._workloads.stack.judge.terms import TERM_HELP

#: Fraction of an entry's tolerance that a possible ReLU flip may move it before it is unjudgeable.
KINK_IMPACT_FRACTION = 0.25


class StackGradJudge:
    """The stack's gradient at one point (``weights`` ``(L, d, d)``, ``x`` ``(N, d)``)."""

    signature = "grad(weights, x)"

    def __init__(self, point: Point, options: Options) -> None:
        self.point, self.options = point, options
        self.weights, self.x = point.params["weights"], point.inputs["x"]
        self.dtype = point.dtype
        self.notes: dict[str, dict[str, Any]] = {}
        self.fwd = _forward.forward(self.weights, self.x)
        self.deltas, _ = _forward.backward(self.fwd, grads=False)
        self._models: dict[str, rounding.RoundingModel] = {}
        self._underflows: dict[str, _underflow.Underflow] = {}
        #: Kink judgements by dtype, with the digest of the tolerance they were made for (the same for
        #: every candidate of a dtype: computed once; a digest, not a copy of a gradient-sized array).
        self._kinks_memo: dict[str, tuple[tuple, Any]] = {}
        #: The screening strategy, when the reference screened (``screen.Screening``).
        self.screening: _screen.Screening | None = None
        self.oracle_backend: Any = None
        #: A verdict per candidate that agrees in a 16-bit dtype (``_compare.low``) or on a device.
        self.verdicts: dict[str, Any] = {}
        #: The candidate being compared computes on a device whose float32 unit roundoff is this many
        #: times float32's (``device.Arithmetic``): its rounding model is scaled so (``model``).
        self.device_scale = 1.0
        #: In a view held at a candidate's own ReLU pattern (``judge.pattern``), that pattern.
        self.pattern: _pattern.Pattern | None = None

    # -- the protocol -------------------------------------------------------------------------------

    def evaluate(self, backend: Any, call: Call) -> Outcome:
        return self.gradient(backend, call, self.weights, self.x)

    def gradient(self, backend: Any, call: Call, weights: np.ndarray, x: np.ndarray) -> Any:
        """``backend.grad(weights, x)``, guarded, as ``{"weights": array}``."""
        _, problem = declared_dtype(backend, self.dtype)
        if problem:
            return call.failure(problem)
        out = call(backend.grad, weights, x, convert="array")
        return out if out.error else dataclasses.replace(out, value={"weights": out.value})

    def reference(self, backend: Any, call: Call) -> Outcome:
        self.oracle_backend = backend
        if self._mode(backend) == "screen":
            out, screening = _screen.screen_reference(self, backend, call)
            if screening is not None:
                self.screening = screening
                self.reuse_model(getattr(screening.estimate, "rounding", None))
            return out
        if callable(getattr(backend, "estimate", None)):
            out = call(backend.estimate, self.weights, self.x, progress=self.progress("oracle"))
            if out.error:
                return out
            est = out.value
            self.reuse_model(getattr(est, "rounding", None))
            notes = {"evaluations": est.evaluations, "kink_entries": int(est.kink.sum())}
            data = GradAnswer(est.value, est.error, est.kink, est.kink_at)
            return dataclasses.replace(out, value=Reference({"weights": est.value}, "float64", notes, data))
        return self._backend_reference(backend, call)

    def compare(
        self, backend: Any, value: dict[str, np.ndarray], name: str, reference: Reference, call: Call
    ) -> list[Comparison]:
        candidate = value["weights"]
        dtype, _ = declared_dtype(backend, self.dtype)
        device = arithmetic(backend, call)
        self.device_scale = scale(device, dtype)
        try:  # on the candidate's own ReLU pattern where it shows one within rounding
            judged = lambda judge: judge._compared(backend, candidate, name, reference, dtype, call)  # noqa: E731
            comparison = _patterned.compared(self, backend, dtype, call, judged)
        finally:
            self.device_scale = 1.0
        if device is not None and device.unit is not None and comparison.status == "ok":
            self.verdicts[name] = Verdict(device.hides())
        return [comparison]

    def _compared(
        self, backend: Any, candidate: np.ndarray, name: str, reference: Reference, dtype: str, call: Call
    ) -> Comparison:
        """``compare``'s one comparison, with the candidate's device scale set."""
        if self.screening is not None:
            comparison = _screen.compare_screened(
                self, self.screening, candidate, name, reference, dtype, call
            )
            comparison = _spot.spot_checked(
                self, self.screening, comparison, candidate, reference, dtype, call
            )
        else:
            comparison = self.compare_full(candidate, name, reference, dtype)
        if self.options.explain:
            comparison = self._localize(backend, comparison, dtype, call)
            if comparison.status == "mismatch" and self.screening is None:
                comparison = self._classify(backend, comparison, candidate, reference, call)
        if is_low(dtype) and comparison.status == "ok":
            # Only a full reference has every entry (a screened one: the noise is not known).
            full = reference.data.value if isinstance(reference.data, GradAnswer) else None
            bound = {"weights": self.model(dtype).grad_bound}
            relative = 0.0 if full is None else _low.noise(bound, {"weights": full})
            said = _low.text(dtype, relative, moves="entries", aside=_unjudged(comparison, dtype))
            self.verdicts[name] = Verdict(said)
        return comparison

    def extras(self, reference: Reference | None) -> dict[str, Any]:
        extras: dict[str, Any] = {"quantity": "grad", "verdicts": dict(self.verdicts)}
        return {**extras, **({"sections": (SECTION,)} if self.options.explain else {})}

    # -- the reference ------------------------------------------------------------------------------

    def _mode(self, backend: Any) -> str:
        can_screen = callable(getattr(backend, "screen", None))
        mode = self.options.oracle.mode
        if mode == "screen" and not can_screen:
            raise ValueError(
                "`oracle_mode` 'screen' needs a reference that can screen (the numpy-fd oracle)."
            )
        if mode == "auto":
            flops = cost.full_oracle_flops(self.weights.shape[0], self.x.shape[0], self.weights.shape[1])
            return "screen" if can_screen and flops > cost.SCREEN_FLOPS else "full"
        return mode

    def _backend_reference(self, backend: Any, call: Call) -> Any:
        """Another backend as the reference: its gradient, judged by its own modelled rounding."""
        out = self.evaluate(backend, call)
        if out.error:
            return out
        value = out.value["weights"]
        if value.shape != self.weights.shape or not np.all(np.isfinite(value)):
            error = (
                f"reference gradient must be finite with shape {self.weights.shape}; "
                f"found shape {value.shape}"
            )
            return dataclasses.replace(out, value=None, error=error)
        dtype = value.dtype.name if value.dtype.name in ALL_DTYPES else "float64"
        data = GradAnswer(value.astype(np.float64), self.model(dtype).grad_bound)
        return dataclasses.replace(out, value=Reference({"weights": value}, value.dtype.name, {}, data))

    # -- comparing ----------------------------------------------------------------------------------

    def underflow(self, dtype: str) -> _underflow.Underflow:
        if dtype not in self._underflows:
            self._underflows[dtype] = _underflow.underflow(self.fwd, self.deltas, dtype)
        return self._underflows[dtype]

    def reuse_model(self, model: Any) -> None:
        """Keep the oracle's float64 rounding model (made from the same point, seed and directions as
        this judge's would be) instead of computing it again; anything else is ignored."""
        screening = self.screening is not None
        if not isinstance(model, rounding.RoundingModel) or model.dtype != "float64":
            return
        if model.grad_sigma.shape != self.weights.shape or (model.direction_sigma is None) == screening:
            return
        self._models.setdefault("float64", model)

    def model(self, dtype: str) -> rounding.RoundingModel:
        """The rounding model of ``dtype``; the candidate's, scaled to its device (``device_scale``)."""
        if dtype not in self._models:
            directions = None if self.screening is None else self.screening.directions
            self._models[dtype] = rounding.rounding_model(self.fwd, self.deltas, dtype, directions=directions)
        found = self._models[dtype]
        return found if dtype == "float64" else found.scaled(self.device_scale)

    def compare_full(self, value: np.ndarray, name: str, reference: Reference, dtype: str) -> Comparison:
        """Every entry against the reference's, within modelled rounding, its error bar and kinks."""
        oracle: GradAnswer = _patterned.answer(reference.data, self.pattern)
        u = _constants.UNIT_ROUNDOFF[accumulation(dtype)]  # a 16-bit dtype's sums are float32's
        own = self.model(dtype).grad_bound
        floor = _terms.floor(_terms.largest(np.nan_to_num(oracle.value)), u, ulps=_terms.SAFETY_FLOOR_ULPS)
        terms: dict[str, Any] = {
            "rounding": own,
            "reference": oracle.error,
            "floor": floor,
            "slack": np.broadcast_to(self.options.slack_at(oracle.value), oracle.value.shape),
        }
        flow = self.underflow(dtype).grad
        if flow.any():  # only a case reaching the underflow range has (or shows) this term
            terms["underflow"] = flow
        kinks, minor = self.judged_kinks(Tolerance(terms).total(), dtype, oracle)
        found = compare(
            value,
            oracle.value,
            Tolerance({**terms, "kinks": minor}),
            backend=name,
            reference_name=reference.name,
            dtype=dtype,
            kinks=kinks,
            strict=self.options.strict,
            keep=self.options.plot,
            index_names=rounding.INDEX_NAMES,
            term_help=TERM_HELP,
            split=rounding.INDEX_NAMES[0],
        )
        return _with_rounding(self.range_cause(found, value, dtype), own + floor + flow)

    def range_cause(self, found: Comparison, value: np.ndarray, dtype: str) -> Comparison:
        """A non-finite result's cause, when the case's values pass ``dtype``'s range (float16)."""
        if found.status != "invalid" or np.all(np.isfinite(np.asarray(value, np.float64))):
            return found
        cause = _underflow.overflow(self.fwd, self.deltas, dtype)
        return dataclasses.replace(found, message=f"{found.message} {cause}") if cause else found

    def judged_kinks(
        self, tol: np.ndarray, dtype: str, oracle: GradAnswer, at: np.ndarray | None = None
    ) -> tuple[Kinks, np.ndarray]:
        """Judge kink-ambiguous entries on both sides of one kink; more than one is unjudgeable. With
        ``at`` (``(S, 3)`` entries), of those entries alone: ``oracle``'s fields are theirs, ``(S,)``."""
        bounds, found, effects = self.kink_effects(dtype, tol)
        if at is not None:
            where = tuple(np.asarray(at).T)
            picked = {
                name: getattr(effects, name)[where] for name in ("count", "alternative", "culprit", "minor")
            }
            effects = dataclasses.replace(effects, **picked)
        unjudgeable = effects.count > 1
        reason = np.where(unjudgeable, f"{dtype} rounding may flip several ReLUs", "").astype(object)
        kink = np.full(unjudgeable.shape + (len(rounding.KINK_NAMES),), -1, np.int64)
        involved = effects.count > 0
        if len(found):
            kink[involved] = found[effects.culprit[involved]]
        alternative = np.where(effects.count == 1, oracle.value + effects.alternative, np.nan)
        if oracle.kink is not None and oracle.kink_at is not None and oracle.kink.any():
            stuck = oracle.kink & ~unjudgeable & ~self._exact_zero_kinks(bounds, oracle)
            unjudgeable = unjudgeable | stuck
            reason[stuck] = "oracle step crosses a ReLU kink"
            kink[stuck] = oracle.kink_at[stuck]
            alternative[stuck] = np.nan
        return Kinks(unjudgeable, reason, kink, alternative), effects.minor

    def kink_effects(self, dtype: str, tol: np.ndarray, scale: float = 1.0):
        """The ambiguous pre-activations for ``dtype`` (with their bounds) and what flipping them does,
        for the tolerance ``scale * tol`` (a screen passes the rounding model's sigma and ``SAFETY``:
        the same products, a layer at a time, with no gradient-sized ``grad_bound`` made for it)."""
        memo, key = self._kinks_memo.get(dtype), (_digest(tol), scale)
        if memo is not None and memo[0] == key:
            return memo[1]
        bounds = _patterned.kink_bounds(self, dtype)
        found = _kinks.ambiguous_kinks(self.fwd, bounds)
        low, fraction = is_low(dtype), KINK_IMPACT_FRACTION * scale
        effects = _kinks.kink_effects(
            self.fwd, self.deltas, found, tol, bounds, last_layer_forward=low, fraction=fraction
        )
        self._kinks_memo[dtype] = (key, (bounds, found, effects))
        return bounds, found, effects

    def forget_kinks(self, dtype: str) -> None:
        """Drop ``dtype``'s kink judgement (a screen that has taken what it needs of it: three
        gradient-sized arrays less for the rest of the run)."""
        self._kinks_memo.pop(dtype, None)

    def _exact_zero_kinks(self, bounds: list[np.ndarray], oracle: GradAnswer) -> np.ndarray:
        """Oracle kink entries whose kink is an exact zero that the candidate also computes exactly."""
        at, kink = oracle.kink_at, oracle.kink
        assert at is not None and kink is not None
        exact = np.zeros(at.shape[:-1], bool)
        for index in zip(*np.nonzero(kink), strict=True):
            layer, row, unit = at[index]
            exact[index] = self.fwd.zs[layer][row, unit] == 0 and bounds[layer][row, unit] == 0
        return exact

    # -- explaining ---------------------------------------------------------------------------------

    def _localize(self, backend: Any, comparison: Comparison, dtype: str, call: Call) -> Comparison:
        """Add the layer-by-layer forward comparison (when the backend exposes its activations)."""
        activations = getattr(backend, "activations", None)
        if not callable(activations) or comparison.status == "invalid":
            return comparison
        out = call(activations, self.weights, self.x)
        if out.error:
            forward = [{"error": out.error}]
        else:
            try:
                forward = forward_layers(out.value, self.fwd, self.model(dtype))
            except Exception as exc:  # localization is a diagnosis: it must not fail the run
                forward = [{"error": f"{type(exc).__name__}: {exc}"}]
        return dataclasses.replace(comparison, forward=forward)

    def _classify(
        self, backend: Any, comparison: Comparison, value: np.ndarray, reference: Reference, call: Call
    ) -> Comparison:
        def grad(weights: np.ndarray, x: np.ndarray) -> np.ndarray:
            out = self.gradient(backend, call, weights, x)
            if out.error:
                raise RuntimeError(out.error)
            return out.value["weights"]

        def rerun(new_value: np.ndarray, dtype: str) -> Comparison:
            return self.compare_full(new_value, comparison.backend, reference, dtype)

        localized = verdict(comparison.forward, comparison.per_layer)
        args = (backend, grad, self.weights, self.x, value, rerun, localized, self._nudged(call))
        out = call(classify, *args)  # a diagnosis is guarded too: it must not fail the run
        found = out.value if out.ok else {"verdict": "unclassified", "evidence": [f"a re-run: {out.error}"]}
        return dataclasses.replace(comparison, classification=found)

    def _nudged(self, call: Call):
        """A check of the candidate on weights moved ~1e-3 off every kink, against the same oracle."""

        def check(backend: Any) -> bool:
            # Integer or near-zero inputs put pre-activations on kinks; a relative nudge of ~1e-3 of the
            # weights moves them off (the same case, up to a perturbation far above rounding).
            rng = np.random.default_rng(1)
            scale = 1e-3 * float(np.sqrt(np.mean(self.weights.astype(np.float64) ** 2)) or 1.0)
            moved = (self.weights + scale * rng.standard_normal(self.weights.shape)).astype(self.dtype)
            point = Point({"weights": moved}, {"x": self.x.copy()}, self.point.case, self.dtype)
            judge = StackGradJudge(point, Options(oracle=Oracle("full")))
            ref, out = judge.reference(self.oracle_backend, call), judge.evaluate(backend, call)
            if ref.error or out.error:
                return False
            found = judge.compare(backend, out.value, "nudged", ref.value, call)
            return all(c.passed for c in found)

        return check

    def progress(self, description: str):
        """The run's progress callback for one stage of the oracle, or None."""
        progress = self.options.progress
        if progress is None:
            return None
        return lambda done, total: progress(description, done, total)


def _digest(values: np.ndarray) -> tuple:
    """What identifies a tolerance array for the kink memo: its shape, dtype and a BLAKE2b digest of
    its bytes (read in place, never copied)."""
    values = np.ascontiguousarray(values)
    return values.shape, values.dtype.str, hashlib.blake2b(values.data.cast("B")).hexdigest()


def _unjudged(comparison: Comparison, dtype: str) -> str:
    """What a 16-bit verdict says of the entries ReLU flips left unjudged ("" when none)."""
    if not comparison.unjudgeable:
        return ""
    share = comparison.unjudgeable / max(comparison.total, 1)
    return f", {share:.0%} of entries unjudgeable (ReLUs {dtype} rounding may flip)"


def _with_rounding(comparison: Comparison, bound: np.ndarray) -> Comparison:
    """Keep the candidate's own rounding bound (what a repeated call may differ by) with the record."""
    arrays = {**comparison.arrays, "rounding": {"weights": np.asarray(bound)}}
    return dataclasses.replace(comparison, arrays=arrays)
