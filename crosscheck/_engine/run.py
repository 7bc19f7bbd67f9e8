"""The driver: build inputs, run every backend, compare each candidate with the reference."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from crosscheck._compare.compare import (
    Comparison,
    Kinks,
    Tolerance,
    _structural_problem,
    compare,
    mismatch_message,
)
from crosscheck._engine.candidates import run_candidates
from crosscheck._engine.run_workload import run_workload
from crosscheck._registry import (
    DEFAULTS,
    ORACLE,
    Backend,
    BackendBroken,
    BackendUnavailable,
    backend_info,
    load_backend,
)
from crosscheck._report.environment import environment
from crosscheck._report.report import BackendResult, Report
from crosscheck._workloads.base import load_workload
from crosscheck._workloads.stack import model as _stack
from crosscheck._workloads.stack.case import Case, check_inputs, make_inputs

MODIFIED = "modified its inputs (`weights` or `x`); backends must not write to them"
#: Fraction of an entry's tolerance that a possible ReLU flip may move it before it is unjudgeable.
KINK_IMPACT_FRACTION = 0.25

Progress = Callable[[str, int, int], None]

ORACLE_MODES = ("auto", "full", "screen")
QUANTITIES = ("grad", "hvp")
#: Above this many floating-point operations of matrix products (about 10-20 s here) "auto" screens.
SCREEN_FLOPS = 1.5e11


def full_oracle_flops(layers: int, batch: int, dim: int) -> float:
    """Matrix-product flops of the full oracle: per entry, two evaluations of the layers after it."""
    return float(sum(2 * dim * dim * (layers - 1 - k) * 2 * batch * dim * dim for k in range(layers)))


def run(
    *,
    weights: Any = None,
    x: Any = None,
    layers: int = 8,
    batch: int = 8,
    dim: int = 16,
    dtype: str = "float32",
    seed: int = 0,
    init: str = "gaussian",
    scale: float = 1.0,
    backends: Sequence[Any] | None = None,
    reference: Any = ORACLE,
    rtol: float | None = None,
    atol: float | None = None,
    strict: bool = False,
    oracle_mode: str = "auto",
    directions: int = 4,
    explain: bool = False,
    progress: Progress | None = None,
    quantity: str = "grad",
    workload: Any = None,
    repeat: int = 2,
) -> Report:
    """Run one case (generated, or the given arrays) and cross-check every backend's gradient.

    Args:
        weights, x: your own arrays (``(L, d, d)`` and ``(N, d)``, float32 or float64), given together;
            otherwise the case options below generate them.
        layers, batch, dim, dtype, seed, init, scale: the generated case (see ``Case``).
        backends: names, import strings, backend objects or plain functions; default: every built-in
            backend except the reference.
        reference: the backend the others are compared with (default: the ``numpy-fd`` oracle).
        rtol, atol: user slack added to every entry's tolerance; give both or neither.
        strict: fail when any entry is unjudgeable (a ReLU kink makes it ambiguous).
        oracle_mode: ``"full"`` (every entry), ``"screen"`` (``directions`` random directional
            derivatives per layer, then every entry of each layer that fails them) or ``"auto"``
            (screen when the full oracle would cost more than ``SCREEN_FLOPS``).
        directions: directions per layer when screening.
        explain: also compare each candidate's forward activations layer by layer (when it exposes
            ``activations(weights, x)``), to say where a disagreement starts.
        progress: called as ``progress(description, done, total)`` during long work.
        quantity: ``"grad"`` (the gradient) or ``"hvp"``: the Hessian-vector product ``H v`` of the loss
            with respect to the weights, along a direction ``v`` made from ``seed`` (see README,
            "Hessian-vector products"); candidates need an ``hvp(weights, x, v)`` method.
        repeat: how many times each candidate is called (gradcheck's reentrancy check): a second result
            that differs beyond the candidate's rounding fails it; ``1`` turns the check off.
        workload: a ``Workload``, a built-in workload name or an import string ``module:attribute``;
            default (or ``"stack"``): the ReLU stack. Another workload defines its own arrays, so only
            ``dtype``, ``seed``, ``backends``, ``reference``, ``rtol``/``atol`` and ``strict`` apply;
            its comparisons are one per (backend, parameter).

    Returns:
        A ``Report``: ``.passed`` and ``.to_dict()`` (the JSON report).

    Raises:
        ValueError, TypeError: bad arguments (the message says what was expected and found).

    Example:
        >>> import crosscheck
        >>> crosscheck.run(layers=3, dim=4, backends=["jax"]).passed  # doctest: +SKIP
        True
    """
    if (rtol is None) != (atol is None):
        raise ValueError(
            "`rtol` and `atol` must be given together or not at all; found only "
            f"`{'rtol' if atol is None else 'atol'}`."
        )
    for name, value in (("rtol", rtol), ("atol", atol)):
        if value is not None and not (np.isfinite(value) and value >= 0):
            raise ValueError(f"`{name}` must be a non-negative finite number, found {value!r}.")
    if isinstance(repeat, bool) or not isinstance(repeat, int) or repeat < 1:
        raise ValueError(f"`repeat` must be a positive integer, found {repeat!r}.")
    chosen = load_workload(workload)
    if chosen is not None:
        _stack_only(locals(), chosen.name)
        return run_workload(
            chosen,
            seed=seed,
            dtype=dtype,
            backends=backends,
            reference=reference,
            rtol=rtol,
            atol=atol,
            strict=strict,
        )
    if (weights is None) != (x is None):
        raise ValueError("`weights` and `x` must be given together or not at all.")
    if weights is None:
        case = Case(layers=layers, batch=batch, dim=dim, dtype=dtype, seed=seed, init=init, scale=scale)
        weights, x = make_inputs(case)
        case_record = case.to_dict()
    else:
        weights, x = check_inputs(weights, x)
        case_record = _user_case(weights, x)
    specs = list(backends) if backends is not None else [b for b in DEFAULTS if b != reference]
    if oracle_mode not in ORACLE_MODES:
        raise ValueError(f"`oracle_mode` must be one of {', '.join(ORACLE_MODES)}; found {oracle_mode!r}.")
    if isinstance(directions, bool) or not isinstance(directions, int) or directions < 1:
        raise ValueError(f"`directions` must be a positive integer, found {directions!r}.")
    if quantity not in QUANTITIES:
        raise ValueError(f"`quantity` must be one of {', '.join(QUANTITIES)}; found {quantity!r}.")
    if quantity == "hvp":
        if explain or oracle_mode == "screen":
            which = "`explain`" if explain else "`oracle_mode` 'screen'"
            raise ValueError(f"{which} is not available with quantity 'hvp' (its oracle checks every entry).")
        from crosscheck._engine.run_hvp import HvpDriver

        # User arrays have no seed: their direction comes from seed 0.
        hvp_seed = seed if case_record.get("source") != "user arrays" else 0
        driver = HvpDriver(weights, x, case_record, hvp_seed, rtol, atol, strict)
        return driver.run(specs, reference, backends is not None)
    driver = _Driver(weights, x, case_record, rtol, atol, strict, progress)
    driver.oracle_mode, driver.n_directions, driver.explain = oracle_mode, directions, explain
    return driver.run(specs, reference, backends is not None)


#: Options of ``run`` that only the stack has, with their defaults.
_STACK_ONLY = {
    "weights": None,
    "x": None,
    "layers": 8,
    "batch": 8,
    "dim": 16,
    "init": "gaussian",
    "scale": 1.0,
    "oracle_mode": "auto",
    "directions": 4,
    "explain": False,
    "quantity": "grad",
}  # repeat applies to every workload


def _stack_only(given: dict[str, Any], workload: str) -> None:
    for name, default in _STACK_ONLY.items():
        value = given[name]
        if value is not default and not (default is not None and value == default):
            raise ValueError(
                f"`{name}` applies to the stack workload only; workload `{workload}` defines its own "
                f"arrays (give `dtype` and `seed`)."
            )


def _user_case(weights: np.ndarray, x: np.ndarray) -> dict[str, Any]:
    return {
        "source": "user arrays",
        "layers": weights.shape[0],
        "batch": x.shape[0],
        "dim": x.shape[1],
        "dtype": weights.dtype.name,
        "weights_sha256": hashlib.sha256(np.ascontiguousarray(weights).tobytes()).hexdigest(),
        "x_sha256": hashlib.sha256(np.ascontiguousarray(x).tobytes()).hexdigest(),
    }


@dataclasses.dataclass
class _Driver:
    weights: np.ndarray
    x: np.ndarray
    case: dict[str, Any]
    rtol: float | None
    atol: float | None
    strict: bool
    progress: Progress | None

    def __post_init__(self) -> None:
        self.dtype = self.weights.dtype.name
        self.pristine = (self.weights.copy(), self.x.copy())
        self.fwd = _stack.forward(self.weights, self.x)
        self.deltas, _ = _stack.backward(self.fwd)
        self._models: dict[str, _stack.RoundingModel] = {}
        self.oracle = self.screened = None

    def run(self, specs: list[Any], reference_spec: Any, explicit: bool) -> Report:
        results: dict[str, BackendResult] = {}
        self.gradients: dict[str, np.ndarray] = {}
        ref_backend, ref_result = self._load(reference_spec, explicit=True)
        ref_value, ref_error = None, None
        if ref_backend is not None:
            ref_value, ref_error, ref_result = self._reference(ref_backend, ref_result)
            if ref_value is not None and not np.all(np.isnan(ref_value)):
                self.gradients[ref_result.name] = ref_value
        results[ref_result.name] = ref_result
        comparisons: list[Comparison] = []

        def evaluate(backend: Backend, result: BackendResult, name: str) -> BackendResult:
            value, result = self._call(backend, result)
            if value is None:
                return result
            self.gradients[name] = value
            # A backend may compute in another precision on purpose (the oracle: float64).
            dtype = getattr(backend, "output_dtype", None) or self.dtype
            if self.screened is not None:
                comparison = self._compare_screened(value, result.name, ref_result.name, dtype)
            else:
                comparison = self._compare(value, result.name, ref_value, ref_error, ref_result.name, dtype)
            if self.explain:
                comparison = self._localize(backend, comparison, dtype)
                if comparison.status == "mismatch" and self.screened is None:
                    comparison = self._classify(
                        backend, comparison, value, ref_value, ref_error, ref_result.name
                    )
            comparisons.append(comparison)
            return result

        run_candidates(
            specs,
            functools.partial(self._load, explicit=explicit),
            evaluate,
            reference_ran=ref_value is not None,
            results=results,
        )
        return Report(
            case=self.case,
            backends=results,
            comparisons=comparisons,
            reference=ref_result.name,
            strict=self.strict,
            environment=environment(),
            inputs=(self.weights.copy(), self.x.copy()),
            explain=self.explain,
            gradients=self.gradients,
        )

    def _load(self, spec: Any, *, explicit: bool) -> tuple[Backend | None, BackendResult]:
        name = spec if isinstance(spec, str) else getattr(spec, "name", getattr(spec, "__name__", "?"))
        try:
            backend = load_backend(spec)
        except BackendUnavailable as exc:
            return None, BackendResult(
                name=str(name), status="unavailable", error=str(exc), required=explicit
            )
        except BackendBroken as exc:  # an installed plugin that fails: report it, run the others
            return None, BackendResult(name=str(name), status="failed", error=str(exc), required=explicit)
        # A name or import string can be loaded again (by `crosscheck replay`); an object cannot.
        notes = {"spec": spec} if isinstance(spec, str) else {}
        return backend, BackendResult(
            name=str(backend.name),
            status="pending",
            required=explicit,
            info=backend_info(backend),
            notes=notes,
        )

    def _reference(self, backend: Backend, result: BackendResult):
        """Run the reference: ``(value, error bar, result)``, or ``(None, None, result)`` if it failed."""
        self.oracle, self.screened, self.oracle_backend = None, None, backend
        result = dataclasses.replace(result, role="reference")
        if self._mode(backend) == "screen":
            return self._screen_reference(backend, result)
        if callable(getattr(backend, "estimate", None)):
            est, result = self._timed(backend.estimate, result, progress=self._progress("oracle"))
            if est is None:
                return None, None, result
            self.oracle = est
            notes = {"evaluations": est.evaluations, "kink_entries": int(est.kink.sum())}
            notes = {**result.notes, **notes}
            return est.value, est.error, dataclasses.replace(result, dtype="float64", notes=notes)
        value, result = self._call(backend, result)
        if value is None:
            return None, None, result
        if value.shape != self.weights.shape or not np.all(np.isfinite(value)):
            error = (
                f"reference gradient must be finite with shape {self.weights.shape}; "
                f"found shape {value.shape}"
            )
            return None, None, dataclasses.replace(result, status="failed", error=error)
        dtype = value.dtype.name if value.dtype.name in _stack.UNIT_ROUNDOFF else "float64"
        return value.astype(np.float64), self._model(dtype).grad_bound, result

    def _timed(self, fn, result: BackendResult, *args, **kwargs):
        """Call ``fn(weights, x, *args, **kwargs)``; a raise or a write to the inputs is a failure."""
        start = time.perf_counter()
        try:
            value = fn(self.weights, self.x, *args, **kwargs)
        except Exception as exc:
            self._restore()
            return None, dataclasses.replace(result, status="failed", error=f"{type(exc).__name__}: {exc}")
        elapsed = time.perf_counter() - start
        if self._restore():
            return None, dataclasses.replace(result, status="failed", seconds=elapsed, error=MODIFIED)
        return value, dataclasses.replace(result, status="ok", seconds=elapsed)

    def _mode(self, backend: Backend) -> str:
        can_screen = callable(getattr(backend, "screen", None))
        if self.oracle_mode == "screen" and not can_screen:
            raise ValueError(
                "`oracle_mode` 'screen' needs a reference that can screen (the numpy-fd oracle)."
            )
        if self.oracle_mode == "auto":
            flops = full_oracle_flops(*self.weights.shape[:1], self.x.shape[0], self.weights.shape[1])
            return "screen" if can_screen and flops > SCREEN_FLOPS else "full"
        return self.oracle_mode

    def _screen_reference(self, backend: Backend, result: BackendResult):
        shape = self.weights.shape
        rng = np.random.default_rng(0)  # fixed: the same case is screened along the same directions
        directions = rng.choice([-1.0, 1.0], size=(shape[0], self.n_directions, shape[1], shape[2]))
        self.screened, result = self._timed(
            backend.screen, result, directions, progress=self._progress("oracle (screening)")
        )
        if self.screened is None:
            return None, None, result
        self._full: dict[int, tuple[np.ndarray, ...]] = {}
        nan = np.full(shape, np.nan)
        notes = {
            **result.notes,
            "mode": "screen",
            "directions": self.n_directions,
            "evaluations": self.screened.evaluations,
        }
        return nan, nan.copy(), dataclasses.replace(result, dtype="float64", notes=notes)

    def _full_layers(self, layers: list[int]) -> tuple[np.ndarray, np.ndarray]:
        """The oracle on every entry of ``layers`` (cached across candidates); NaN elsewhere."""
        missing = [k for k in layers if k not in self._full]
        if missing:
            est = self.oracle_backend.estimate(
                self.weights, self.x, layers=missing, progress=self._progress("oracle (full check)")
            )
            for k in missing:
                self._full[k] = (est.value[k], est.error[k], est.kink[k], est.kink_at[k])
        shape = self.weights.shape
        value, error = np.full(shape, np.nan), np.full(shape, np.nan)
        kink, kink_at = np.zeros(shape, bool), np.full(shape + (3,), -1, np.int64)
        for k in layers:
            value[k], error[k], kink[k], kink_at[k] = self._full[k]
        self.oracle = _PartialOracle(kink, kink_at)
        return value, error

    def _compare_screened(self, value, name, ref_name, dtype) -> Comparison:
        """Screen the candidate along the oracle's directions; check failing layers entry by entry."""
        sc = self.screened
        candidate = np.asarray(value)
        problem = _structural_problem(candidate, self.weights.shape, dtype)
        if problem:
            return Comparison(
                backend=name,
                reference=ref_name,
                passed=False,
                status="invalid",
                total=candidate.size,
                message=problem,
            )
        model = self._model(dtype)
        projected = np.einsum("kij,ksij->ks", candidate.astype(np.float64), sc.directions)
        u = _stack.UNIT_ROUNDOFF[dtype]
        size = self.weights.shape[1]
        slack = 0.0 if self.rtol is None else self.atol * size * size + self.rtol * np.abs(sc.value)
        # The floor term of every entry, summed in quadrature over the d * d entries of a direction.
        floor = _stack.SAFETY * u * size * float(np.max(np.abs(candidate), initial=0.0))
        kinks, several = self._kink_slack(dtype)
        tol = _stack.SAFETY * model.direction_sigma + sc.error + floor + slack + kinks
        diff = np.abs(projected - sc.value)
        failing = sorted({int(k) for k in np.nonzero(diff > tol)[0]} | several)
        screening = [
            {
                "layer": k,
                "directions": int(sc.value.shape[1]),
                "mismatched": int(np.count_nonzero(diff[k] > tol[k])),
                "worst_ratio": float(np.max(np.where(diff[k] == 0, 0.0, diff[k] / tol[k]))),
                "full_check": k in failing,
            }
            for k in range(sc.value.shape[0])
        ]
        coverage = (
            f"screened: {sc.value.shape[0]} layers x {sc.value.shape[1]} random directions; "
            f"layers checked entry by entry: {failing or 'none'}"
        )
        if failing:
            ref_value, ref_error = self._full_layers(failing)
            comparison = self._compare(candidate, name, ref_value, ref_error, ref_name, dtype)
        else:
            comparison = Comparison(
                backend=name, reference=ref_name, passed=True, status="ok", total=candidate.size
            )
        comparison = dataclasses.replace(comparison, coverage=coverage, screening=screening)
        return dataclasses.replace(
            comparison,
            message=coverage + "\n" + mismatch_message(comparison)
            if failing
            else coverage + ": every direction agrees",
        )

    def _localize(self, backend: Backend, comparison: Comparison, dtype: str) -> Comparison:
        """Add the layer-by-layer forward comparison (when the backend exposes its activations)."""
        from crosscheck._workloads.stack.explain import forward_layers

        activations = getattr(backend, "activations", None)
        if not callable(activations) or comparison.status == "invalid":
            return comparison
        try:
            forward = forward_layers(activations(self.weights, self.x), self.fwd, self._model(dtype))
        except Exception as exc:  # localization is a diagnosis: it must not fail the run
            forward = [{"error": f"{type(exc).__name__}: {exc}"}]
        self._restore()
        return dataclasses.replace(comparison, forward=forward)

    def _classify(self, backend, comparison, value, ref_value, ref_error, ref_name) -> Comparison:
        from crosscheck._workloads.stack.explain import classify, verdict

        def rerun(new_value, dtype):
            result = self._compare(new_value, comparison.backend, ref_value, ref_error, ref_name, dtype)
            self._restore()
            return result

        def nudged(candidate) -> bool:
            # Integer or near-zero inputs put pre-activations on kinks; a relative nudge of ~1e-3 of the
            # weights moves them off (the same case, up to a perturbation far above rounding).
            rng = np.random.default_rng(1)
            scale = 1e-3 * float(np.sqrt(np.mean(self.weights.astype(np.float64) ** 2)) or 1.0)
            moved = (self.weights + scale * rng.standard_normal(self.weights.shape)).astype(self.dtype)
            return run(
                weights=moved,
                x=self.x.copy(),
                backends=[candidate],
                reference=self.oracle_backend,
                oracle_mode="full",
            ).passed

        localized = verdict(comparison.forward, comparison.per_layer)
        try:
            found = classify(backend, self.weights, self.x, value, rerun, localized, nudged)
        except Exception as exc:  # a diagnosis must not fail the run
            found = {"verdict": "unclassified", "evidence": [f"a re-run raised {type(exc).__name__}: {exc}"]}
        self._restore()
        return dataclasses.replace(comparison, classification=found)

    def _kink_slack(self, dtype: str) -> tuple[np.ndarray, set[int]]:
        """How far ReLU flips the candidate may see can move each directional derivative, and the
        layers where several flips can move one entry (those are always checked entry by entry)."""
        *_, effects = self._kink_effects(dtype, self._model(dtype).grad_bound)
        moved = np.abs(effects.alternative) * (effects.count > 0) + effects.minor
        several = {int(k) for k in np.nonzero(effects.count > 1)[0]}
        return np.einsum("kij,ksij->ks", moved, np.abs(self.screened.directions)), several

    def _kink_effects(self, dtype: str, tol: np.ndarray):
        """The ambiguous pre-activations for ``dtype`` (with their bounds) and what flipping them does."""
        cand, ref = self._model(dtype), self._model("float64")
        bounds = [cand.z_bound(m) + ref.z_bound(m) for m in range(len(self.fwd.zs))]
        found = _stack.ambiguous_kinks(self.fwd, bounds)
        effects = _stack.kink_effects(self.fwd, self.deltas, found, KINK_IMPACT_FRACTION * tol, bounds)
        return bounds, found, effects

    def _call(self, backend: Backend, result: BackendResult):
        value, result = self._timed(backend.grad, result)
        if value is None:
            return None, result
        try:
            value = np.asarray(value)
        except (ValueError, TypeError) as exc:
            error = f"returned something that is not an array: {type(exc).__name__}: {exc}"
            return None, dataclasses.replace(result, status="failed", error=error)
        return value, dataclasses.replace(result, dtype=value.dtype.name)

    def _restore(self) -> bool:
        """Put the pristine inputs back; return whether they had been modified."""
        modified = False
        for live, pristine in zip((self.weights, self.x), self.pristine, strict=True):
            if not np.array_equal(live, pristine):
                modified = True
                live[...] = pristine
        return modified

    def _model(self, dtype: str) -> _stack.RoundingModel:
        if dtype not in self._models:
            directions = None if self.screened is None else self.screened.directions
            self._models[dtype] = _stack.rounding_model(self.fwd, self.deltas, dtype, directions=directions)
        return self._models[dtype]

    def _compare(self, value, name, ref_value, ref_error, ref_name, dtype) -> Comparison:
        self._ref_value = ref_value
        model = self._model(dtype)
        u = _stack.UNIT_ROUNDOFF[dtype]
        slack = 0.0 if self.rtol is None else self.atol + self.rtol * np.abs(ref_value)
        tolerance = Tolerance(
            {
                "rounding": model.grad_bound,
                "reference": ref_error,
                "floor": _stack.SAFETY * u * float(np.max(np.abs(np.nan_to_num(ref_value)), initial=0.0)),
                "slack": np.broadcast_to(slack, ref_value.shape),
            }
        )
        kinks, minor = self._kinks(tolerance.total(), dtype)
        tolerance = Tolerance({**tolerance.terms, "kinks": minor})
        return compare(
            value,
            ref_value,
            tolerance,
            backend=name,
            reference_name=ref_name,
            dtype=dtype,
            kinks=kinks,
            strict=self.strict,
        )

    def _kinks(self, tol: np.ndarray, dtype: str) -> tuple[Kinks, np.ndarray]:
        """Judge kink-ambiguous entries on both sides of one kink; more than one is unjudgeable."""
        bounds, found, effects = self._kink_effects(dtype, tol)
        unjudgeable = effects.count > 1
        reason = np.where(unjudgeable, f"{dtype} rounding may flip several ReLUs", "").astype(object)
        kink = np.full(unjudgeable.shape + (3,), -1, np.int64)
        involved = effects.count > 0
        if len(found):
            kink[involved] = found[effects.culprit[involved]]
        alternative = np.where(effects.count == 1, self._ref_value + effects.alternative, np.nan)
        if self.oracle is not None and self.oracle.kink.any():
            stuck = self.oracle.kink & ~unjudgeable & ~self._exact_zero_kinks(bounds)
            unjudgeable = unjudgeable | stuck
            reason[stuck] = "oracle step crosses a ReLU kink"
            kink[stuck] = self.oracle.kink_at[stuck]
            alternative[stuck] = np.nan
        return Kinks(unjudgeable, reason, kink, alternative), effects.minor

    def _exact_zero_kinks(self, bounds: list[np.ndarray]) -> np.ndarray:
        """Oracle kink entries whose kink is an exact zero that the candidate also computes exactly."""
        at = self.oracle.kink_at
        exact = np.zeros(at.shape[:-1], bool)
        for index in zip(*np.nonzero(self.oracle.kink), strict=True):
            layer, row, unit = at[index]
            exact[index] = self.fwd.zs[layer][row, unit] == 0 and bounds[layer][row, unit] == 0
        return exact

    def _progress(self, description: str):
        if self.progress is None:
            return None
        return lambda done, total: self.progress(description, done, total)


@dataclasses.dataclass(frozen=True)
class _PartialOracle:
    """The kink flags of an oracle run on some layers only (screening's full checks)."""

    kink: np.ndarray
    kink_at: np.ndarray
