"""A user's ``Workload`` as the engine runs it: the scipy oracle of its float64 loss, and each candidate's
rounding *measured* by a re-run in the other precision.

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
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from crosscheck._compare.compare import Comparison, Kinks, Tolerance, compare
from crosscheck._registry import ORACLE, import_adapter, install_hint, load_backend, plugin_entry_points
from crosscheck._workloads.base import Workload
from crosscheck._workloads.protocol import Options, Point, Reference

#: Multiple of the measured rounding difference (plus its RMS over the parameter) an entry may differ by.
SAFETY = 8.0
#: The floor: this many unit roundoffs of the parameter's largest reference entry.
FLOOR_ULPS = 8.0
#: float64 copies of a workload's arrays alive at once (see ``GenericWorkload.memory``).
MEMORY_ARRAYS = 24
#: Without a re-run in the other precision: this many unit roundoffs of |reference| + its RMS.
FALLBACK_ULPS = 1024.0
UNIT_ROUNDOFF = {"float32": 2.0**-24, "float64": 2.0**-53}
OTHER_DTYPE = {"float32": "float64", "float64": "float32"}
#: Prefixes of implementation names crosscheck differentiates itself: prefix -> (module, class).
FRAMEWORKS = {
    "jax": ("workload_jax", "JaxWorkloadBackend", install_hint("jax")),
    "torch": ("workload_torch", "TorchWorkloadBackend", install_hint("torch")),
}
TERM_HELP = {
    "rounding": (
        f"the candidate's own rounding, measured: {SAFETY:g} x (|its gradient - its re-run in the other "
        "precision| (x 2**-29 for float64) + that difference's RMS over the parameter)"
    ),
    "reference": "the reference's own error (the oracle's finite-difference error bar, or its rounding)",
    "floor": f"{FLOOR_ULPS:g} unit roundoffs of the parameter's largest reference entry",
    "slack": "user slack: atol + rtol * |reference|",
}
#: Options of ``crosscheck.run`` that only the stack has, with their defaults.
STACK_ONLY = {
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
}


class WorkloadOracle:
    """The reference ``numpy-fd`` of a workload: finite differences of its float64 loss."""

    name = ORACLE

    def info(self) -> dict[str, str]:
        return {"framework": "numpy + scipy.differentiate", "version": "", "device": "cpu"}


class GenericWorkload:
    """The engine's view of a ``crosscheck.Workload``."""

    #: True: it makes its own arrays from ``seed`` and ``dtype`` (the stack's case options do not apply).
    own_arrays = True

    def __init__(self, workload: Workload) -> None:
        self.workload, self.name = workload, workload.name

    def defaults(self, reference: Any) -> list[Any]:
        specs = [name for name in self.workload.implementations if name != reference]
        if not specs:
            raise ValueError(
                f"workload `{self.name}` has no implementations to check; give it some "
                f"(`implementations={{'jax': ..., 'torch': ...}}`) or pass `backends`."
            )
        return specs

    def check_candidates(self, specs: Sequence[Any]) -> None:
        if ORACLE in specs:
            raise ValueError(
                f"`{ORACLE}` is the workload oracle: it can be the reference only, not a candidate backend."
            )

    def resolve(self, spec: Any) -> Any:
        """The oracle, an implementation of the workload, or a user's backend."""
        if spec == ORACLE:
            return WorkloadOracle()
        implementations = self.workload.implementations
        if isinstance(spec, str) and spec in implementations:
            return _framework_backend(spec, implementations[spec])
        # A plain name that is no plugin's is an implementation this workload lacks: the stack's own
        # backends (`jax-plain`, ...) would get a params dict where they expect arrays, and fail oddly.
        if isinstance(spec, str) and ":" not in spec and spec not in plugin_entry_points():
            raise ValueError(
                f"workload `{self.name}` has no `{spec}` implementation; it has: "
                f"{', '.join(implementations) or 'none'}."
            )
        return load_backend(spec)

    def memory(self, given: Mapping[str, Any], candidates: Sequence[Any]) -> dict[str, int]:
        """Bytes a case needs, by part: ``MEMORY_ARRAYS`` float64 copies of every parameter and input
        (the arrays, each candidate's gradients and re-run, the oracle's, the tolerance's terms)."""
        sizes = [*self.workload.parameters.values(), *self.workload.inputs.values()]
        entries = sum(math.prod(shape) for shape in sizes)
        return {"arrays": 8 * entries * (MEMORY_ARRAYS + 2 * len(candidates))}

    def point(self, given: Mapping[str, Any]) -> Point:
        for key, default in STACK_ONLY.items():
            value = given.get(key, default)
            if value is not default and not (default is not None and value == default):
                raise ValueError(
                    f"`{key}` applies to the stack workload only; workload `{self.name}` defines its own "
                    f"arrays (give `dtype` and `seed`)."
                )
        seed, dtype = given.get("seed", 0), given.get("dtype", "float32")
        params, inputs = self.workload.make(seed=seed, dtype=dtype)
        case = {
            "workload": self.name,
            "dtype": dtype,
            "seed": int(seed),
            "parameters": {k: list(v) for k, v in self.workload.parameters.items()},
            "inputs": {k: list(v) for k, v in self.workload.inputs.items()},
        }
        return Point(params, inputs, case, dtype)

    def judge(self, quantity: Any, point: Point, options: Options) -> Any:
        if quantity.name != "grad":
            raise ValueError(f"workload `{self.name}` has no quantity {quantity.name!r}; it checks 'grad'.")
        from crosscheck._workloads.generic_judge import GenericJudge

        return GenericJudge(self.workload, point, options)


@functools.lru_cache(maxsize=64)
def _framework_backend(name: str, loss: Any) -> Any:
    """The adapter of an implementation, kept: JAX then compiles each workload's gradient once."""
    prefix = name.split("-", 1)[0]
    if prefix not in FRAMEWORKS:
        raise ValueError(
            f"implementation `{name}`: crosscheck differentiates implementations named "
            f"{', '.join(FRAMEWORKS)} or starting with `jax-`/`torch-`; for another framework pass a "
            f"backend object with `grad(params, inputs) -> dict` (e.g. an import string)."
        )
    module_name, class_name, install = FRAMEWORKS[prefix]
    return getattr(import_adapter(module_name, name, install), class_name)(name, loss)


def rms(values: np.ndarray) -> float:
    return math.sqrt(float(np.mean(np.square(values)))) if np.size(values) else 0.0


@dataclasses.dataclass(frozen=True)
class Answer:
    """The reference of a workload, per parameter: value, error bar, and what cannot be judged."""

    value: dict[str, np.ndarray]
    error: dict[str, np.ndarray]
    kinks: dict[str, Kinks]


def compare_parameters(
    value: dict[str, np.ndarray],
    rounding: dict[str, np.ndarray],
    name: str,
    reference: Reference,
    *,
    workload: Workload,
    dtype: str,
    options: Options,
) -> list[Comparison]:
    """One comparison per parameter of ``workload`` (a missing parameter is an invalid one)."""
    answer: Answer = reference.data
    out = []
    u = UNIT_ROUNDOFF[dtype]
    for k, shape in workload.parameters.items():
        if k not in value:
            message = (
                f"parameter `{k}`: missing from the gradients `{name}` returned "
                f"(it returned: {', '.join(value) or 'nothing'})"
            )
            out.append(Comparison(backend=name, reference=reference.name, parameter=k, passed=False,
                                  status="invalid", total=math.prod(shape), message=message))  # fmt: skip
            continue
        ref_value = answer.value[k]
        floor = np.asarray(FLOOR_ULPS * u * float(np.max(np.abs(ref_value), initial=0.0)))
        terms = {
            "rounding": rounding[k],
            "reference": answer.error[k],
            "floor": floor,
            "slack": np.broadcast_to(options.slack(ref_value), shape),
        }
        found = compare(value[k], ref_value, Tolerance(terms), backend=name, reference_name=reference.name,
                        dtype=dtype, kinks=answer.kinks[k], strict=options.strict, parameter=k,
                        term_help=TERM_HELP)  # fmt: skip
        arrays = {**found.arrays, "rounding": {k: rounding[k] + floor}}
        out.append(dataclasses.replace(found, arrays=arrays))
    return out
