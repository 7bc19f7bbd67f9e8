"""The driver for a workload other than the stack: run every backend on the workload's parameters and
inputs, and compare each candidate's gradient of each parameter with the reference, entry by entry.

The tolerance of an entry is a sum of named terms (see README, "Your own workload"):

- ``rounding``: the candidate's own rounding, *measured*: the same backend re-run on the same values in
  the other precision. For a float32 case, ``|g32 - g64|``; for a float64 case, ``|g32 - g64|`` scaled
  by ``2**-29`` (rounding error is, to first order, proportional to the unit roundoff). Smoothed by the
  difference's RMS over the parameter (one re-run is one sample of the rounding), times ``SAFETY``.
- ``reference``: the oracle's error bar (or, for another backend as reference, its rounding term).
- ``floor``: ``FLOOR_ULPS`` unit roundoffs of the parameter's largest reference entry.
- ``slack``: the user's ``atol + rtol * |reference|``.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from crosscheck._compare.compare import Comparison, Kinks, Tolerance, compare
from crosscheck._engine.candidates import run_candidates
from crosscheck._registry import ORACLE, BackendUnavailable, backend_info, load_backend, plugin_entry_points
from crosscheck._report.environment import environment
from crosscheck._report.report import BackendResult, Report
from crosscheck._workloads.base import Workload, as_dtype
from crosscheck._workloads.oracle import WorkloadEstimate, estimate

#: Multiple of the measured rounding difference (plus its RMS over the parameter) an entry may differ by.
SAFETY = 8.0
#: The floor: this many unit roundoffs of the parameter's largest reference entry.
FLOOR_ULPS = 8.0
#: Without a re-run in the other precision: this many unit roundoffs of |reference| + its RMS.
FALLBACK_ULPS = 1024.0
UNIT_ROUNDOFF = {"float32": 2.0**-24, "float64": 2.0**-53}
OTHER_DTYPE = {"float32": "float64", "float64": "float32"}
#: Prefixes of implementation names crosscheck differentiates itself: prefix -> (module, class).
FRAMEWORKS = {
    "jax": ("workload_jax", "JaxWorkloadBackend", "pip install 'crosscheck[jax]'"),
    "torch": ("workload_torch", "TorchWorkloadBackend", "pip install 'crosscheck[torch]'"),
}
MODIFIED = "modified its inputs (`params` or `inputs`); backends must not write to them"

TERM_HELP = {
    "rounding": (
        f"the candidate's own rounding, measured: {SAFETY:g} x (|its gradient - its re-run in the other "
        "precision| (x 2**-29 for float64) + that difference's RMS over the parameter)"
    ),
    "reference": "the reference's own error (the oracle's finite-difference error bar, or its rounding)",
    "floor": f"{FLOOR_ULPS:g} unit roundoffs of the parameter's largest reference entry",
    "slack": "user slack: atol + rtol * |reference|",
}


def run_workload(
    workload: Workload,
    *,
    seed: int = 0,
    dtype: str = "float32",
    backends: Sequence[Any] | None = None,
    reference: Any = ORACLE,
    rtol: float | None = None,
    atol: float | None = None,
    strict: bool = False,
) -> Report:
    """Cross-check every backend's gradient of every parameter of ``workload`` (see ``crosscheck.run``).

    Raises:
        ValueError: bad inputs from ``generate``, a reference loss that raises or is not finite, a
            backend name the workload has no implementation for.
    """
    params, inputs = workload.make(seed=seed, dtype=dtype)
    loss, source = _oracle_function(workload, params, inputs)
    if backends is None:
        specs: list[Any] = [name for name in workload.implementations if name != reference]
        if not specs:
            raise ValueError(
                f"workload `{workload.name}` has no implementations to check; give it some "
                f"(`implementations={{'jax': ..., 'torch': ...}}`) or pass `backends`."
            )
    else:
        specs = list(backends)
    if ORACLE in specs:
        raise ValueError(
            f"`{ORACLE}` is the workload oracle: it can be the reference only, not a candidate backend."
        )
    case = {
        "workload": workload.name,
        "dtype": dtype,
        "seed": int(seed),
        "parameters": {k: list(v) for k, v in workload.parameters.items()},
        "inputs": {k: list(v) for k, v in workload.inputs.items()},
        "oracle_differentiates": source,
    }
    driver = _Driver(workload, params, inputs, loss, case, rtol, atol, strict)
    return driver.run(specs, reference, explicit=backends is not None)


def _oracle_function(workload: Workload, params, inputs):
    """The float64 function the oracle differentiates, and which it is (``reference`` or ``surrogate``)."""
    p64, i64 = as_dtype(params, "float64"), as_dtype(inputs, "float64")
    _finite_loss(workload, "reference", lambda: workload.reference(dict(p64), i64))
    if workload.surrogate is None:
        return (lambda p: workload.reference(p, i64)), "reference"
    try:
        built = workload.surrogate({k: v.copy() for k, v in p64.items()}, i64)
    except Exception as exc:
        raise ValueError(
            f"workload `{workload.name}`: `surrogate(params, inputs)` raised {type(exc).__name__}: {exc}"
        ) from exc
    if not callable(built):
        raise ValueError(
            f"workload `{workload.name}`: `surrogate(params, inputs)` must return a function of the "
            f"parameters, found {type(built).__name__}."
        )
    _finite_loss(workload, "surrogate", lambda: built(dict(p64)))
    return built, "surrogate (built at the base point: the gradient the implementations compute)"


def _finite_loss(workload: Workload, what: str, call) -> float:
    try:
        value = call()
    except Exception as exc:
        raise ValueError(
            f"workload `{workload.name}`: the `{what}` loss raised at the case's point: "
            f"{type(exc).__name__}: {exc}"
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


class _Oracle:
    """Marks the reference ``numpy-fd``: finite differences of the workload's float64 loss."""

    name = ORACLE

    def info(self) -> dict[str, str]:
        return {"framework": "numpy + scipy.differentiate", "version": "", "device": "cpu"}


@dataclasses.dataclass
class _Reference:
    value: dict[str, np.ndarray]
    error: dict[str, np.ndarray]
    kinks: dict[str, Kinks]


@dataclasses.dataclass
class _Driver:
    workload: Workload
    params: dict[str, np.ndarray]
    inputs: dict[str, np.ndarray]
    loss: Any
    case: dict[str, Any]
    rtol: float | None
    atol: float | None
    strict: bool

    def __post_init__(self) -> None:
        self.dtype = self.case["dtype"]
        self.pristine = {k: v.copy() for k, v in (*self.params.items(), *self.inputs.items())}

    def run(self, specs: list[Any], reference_spec: Any, *, explicit: bool) -> Report:
        results: dict[str, BackendResult] = {}
        gradients: dict[str, dict[str, np.ndarray]] = {}
        ref_backend, ref_result = self._load(reference_spec, explicit=True)
        ref = None
        if ref_backend is not None:
            ref, ref_result = self._reference(ref_backend, ref_result)
            if ref is not None:
                gradients[ref_result.name] = ref.value
        results[ref_result.name] = ref_result
        comparisons: list[Comparison] = []

        def evaluate(backend: Any, result: BackendResult, name: str) -> BackendResult:
            value, result = self._call(backend, result)
            if value is not None:
                gradients[name] = value
                rounding, how = self._rounding(backend, value)
                result = dataclasses.replace(result, notes={**result.notes, "rounding": how})
                comparisons.extend(self._compare(value, rounding, name, ref, ref_result.name))
            return result

        run_candidates(
            specs,
            functools.partial(self._load, explicit=explicit),
            evaluate,
            reference_ran=ref is not None,
            results=results,
        )
        return Report(
            case=self.case,
            backends=results,
            comparisons=comparisons,
            reference=ref_result.name,
            strict=self.strict,
            environment=environment(),
            inputs=(self.params, self.inputs),
            gradients=gradients,
        )

    def _load(self, spec: Any, *, explicit: bool):
        """A backend for ``spec``: the oracle, an implementation of the workload, or a user's object."""
        name = spec if isinstance(spec, str) else getattr(spec, "name", getattr(spec, "__name__", "?"))
        try:
            backend = self._backend(spec)
        except BackendUnavailable as exc:
            return None, BackendResult(
                name=str(name), status="unavailable", error=str(exc), required=explicit
            )
        notes = {"spec": spec} if isinstance(spec, str) else {}
        return backend, BackendResult(
            name=str(backend.name),
            status="pending",
            required=explicit,
            info=backend_info(backend),
            notes=notes,
        )

    def _backend(self, spec: Any) -> Any:
        if spec == ORACLE:
            return _Oracle()
        implementations = self.workload.implementations
        if isinstance(spec, str) and spec in implementations:
            return _framework_backend(spec, implementations[spec])
        # A plain name that is no plugin's is an implementation this workload lacks: the stack's own
        # backends (`jax-plain`, ...) would get a params dict where they expect arrays, and fail oddly.
        if isinstance(spec, str) and ":" not in spec and spec not in plugin_entry_points():
            raise ValueError(
                f"workload `{self.workload.name}` has no `{spec}` implementation; it has: "
                f"{', '.join(implementations) or 'none'}."
            )
        return load_backend(spec)

    def _reference(self, backend: Any, result: BackendResult):
        result = dataclasses.replace(result, role="reference")
        if isinstance(backend, _Oracle):
            start = time.perf_counter()
            try:
                est = estimate(self.loss, {k: v.astype(np.float64) for k, v in self.params.items()})
            except Exception as exc:
                error = f"finite differences of the loss failed: {type(exc).__name__}: {exc}"
                return None, dataclasses.replace(result, status="failed", error=error)
            notes = {
                **result.notes,
                "evaluations": est.evaluations,
                "differentiates": self.case["oracle_differentiates"],
            }
            result = dataclasses.replace(
                result, status="ok", dtype="float64", seconds=time.perf_counter() - start, notes=notes
            )
            return _oracle_reference(est), result
        value, result = self._call(backend, result)
        if value is None:
            return None, result
        problems = [
            k
            for k in self.params
            if k not in value
            or np.shape(value[k]) != self.params[k].shape
            or not np.all(np.isfinite(value[k]))
        ]
        if problems:
            error = f"reference gradient of `{problems[0]}` is missing, of the wrong shape or not finite"
            return None, dataclasses.replace(result, status="failed", error=error)
        rounding, how = self._rounding(backend, value)
        result = dataclasses.replace(result, notes={**result.notes, "rounding": how})
        ref_value = {k: np.asarray(value[k], dtype=np.float64) for k in self.params}
        kinks = {k: Kinks.none(v.shape) for k, v in self.params.items()}
        return _Reference(ref_value, rounding, kinks), result

    def _call(self, backend: Any, result: BackendResult, params=None, inputs=None):
        """``backend.grad(params, inputs)`` timed; a raise, a write to the inputs or a non-dict fails it."""
        params = self.params if params is None else params
        inputs = self.inputs if inputs is None else inputs
        start = time.perf_counter()
        try:
            value = backend.grad(params, inputs)
        except Exception as exc:
            self._restore()
            return None, dataclasses.replace(result, status="failed", error=f"{type(exc).__name__}: {exc}")
        elapsed = time.perf_counter() - start
        if self._restore():
            return None, dataclasses.replace(result, status="failed", seconds=elapsed, error=MODIFIED)
        if not isinstance(value, Mapping):
            error = f"returned {type(value).__name__}; expected a dict of gradients keyed by parameter name"
            return None, dataclasses.replace(result, status="failed", seconds=elapsed, error=error)
        try:
            value = {str(k): np.asarray(v) for k, v in value.items()}
        except (TypeError, ValueError) as exc:
            error = f"returned something that is not an array: {type(exc).__name__}: {exc}"
            return None, dataclasses.replace(result, status="failed", seconds=elapsed, error=error)
        dtypes = sorted({v.dtype.name for v in value.values()})
        return value, dataclasses.replace(
            result, status="ok", seconds=elapsed, dtype=",".join(dtypes) or None
        )

    def _restore(self) -> bool:
        modified = False
        for live, pristine in zip(
            (*self.params.values(), *self.inputs.values()), self.pristine.values(), strict=True
        ):
            if not np.array_equal(live, pristine):
                modified = True
                live[...] = pristine
        return modified

    def _rounding(self, backend: Any, value: dict[str, np.ndarray]):
        """The ``rounding`` term of every parameter, and how it was obtained (see the module's doc)."""
        other = OTHER_DTYPE[self.dtype]
        params, inputs = as_dtype(self.params, other), as_dtype(self.inputs, other)
        rerun = None
        if not isinstance(backend, _Oracle):
            rerun, _ = self._call(backend, BackendResult(name="rerun", status="pending"), params, inputs)
        usable = rerun is not None and all(
            k in rerun and rerun[k].shape == v.shape and rerun[k].dtype.name == other and k in value
            for k, v in self.params.items()
        )
        scale = 1.0 if self.dtype == "float32" else UNIT_ROUNDOFF["float64"] / UNIT_ROUNDOFF["float32"]
        out = {}
        for k in self.params:
            if usable:
                with np.errstate(invalid="ignore"):
                    d = scale * np.abs(np.asarray(value[k], np.float64) - rerun[k].astype(np.float64))
            else:
                mine = np.abs(np.asarray(value.get(k, 0.0), np.float64))
                d = FALLBACK_ULPS * UNIT_ROUNDOFF[self.dtype] * np.broadcast_to(mine, self.params[k].shape)
            d = np.nan_to_num(d, nan=0.0, posinf=0.0)
            out[k] = SAFETY * (d + _rms(d))
        how = (
            f"measured: re-run in {other}"
            if usable
            else f"no usable re-run in {other}: {FALLBACK_ULPS:g} unit roundoffs of |gradient| + RMS"
        )
        return out, how

    def _compare(self, value, rounding, name, ref: _Reference, ref_name) -> list[Comparison]:
        out = []
        u = UNIT_ROUNDOFF[self.dtype]
        for k, shape in self.workload.parameters.items():
            if k not in value:
                message = (
                    f"parameter `{k}`: missing from the gradients `{name}` returned "
                    f"(it returned: {', '.join(value) or 'nothing'})"
                )
                out.append(
                    Comparison(
                        backend=name,
                        reference=ref_name,
                        parameter=k,
                        passed=False,
                        status="invalid",
                        total=math.prod(shape),
                        message=message,
                    )
                )
                continue
            ref_value = ref.value[k]
            slack = 0.0 if self.rtol is None else self.atol + self.rtol * np.abs(ref_value)
            tolerance = Tolerance(
                {
                    "rounding": rounding[k],
                    "reference": ref.error[k],
                    "floor": np.asarray(FLOOR_ULPS * u * float(np.max(np.abs(ref_value), initial=0.0))),
                    "slack": np.broadcast_to(slack, shape),
                }
            )
            out.append(
                compare(
                    value[k],
                    ref_value,
                    tolerance,
                    backend=name,
                    reference_name=ref_name,
                    dtype=self.dtype,
                    kinks=ref.kinks[k],
                    strict=self.strict,
                    parameter=k,
                    term_help=TERM_HELP,
                )
            )
        return out


def _oracle_reference(est: WorkloadEstimate) -> _Reference:
    kinks = {}
    for k, unjudgeable in est.unjudgeable.items():
        none = Kinks.none(unjudgeable.shape)
        kinks[k] = dataclasses.replace(none, unjudgeable=unjudgeable, reason=est.reason[k])
    return _Reference(est.value, est.error, kinks)


@functools.lru_cache(maxsize=64)
def _framework_backend(name: str, loss: Any) -> Any:
    """The adapter of an implementation, kept: JAX then compiles each workload's gradient once."""
    from crosscheck._registry import _import_builtin_module

    prefix = name.split("-", 1)[0]
    if prefix not in FRAMEWORKS:
        raise ValueError(
            f"implementation `{name}`: crosscheck differentiates implementations named "
            f"{', '.join(FRAMEWORKS)} or starting with `jax-`/`torch-`; for another framework pass a "
            f"backend object with `grad(params, inputs) -> dict` (e.g. an import string)."
        )
    module_name, class_name, install = FRAMEWORKS[prefix]
    try:
        module = _import_builtin_module(module_name)
    except ImportError as exc:
        raise BackendUnavailable(
            f"backend `{name}` is unavailable: {exc.name or exc} is not installed ({install})."
        ) from exc
    return getattr(module, class_name)(name, loss)


def _rms(values: np.ndarray) -> float:
    return math.sqrt(float(np.mean(np.square(values)))) if np.size(values) else 0.0
