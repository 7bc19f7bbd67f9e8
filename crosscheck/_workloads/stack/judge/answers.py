"""What the stack's reference answered, as its judges compare with it: the gradient's ``GradAnswer``
(value, error bar and the oracle's kink flags) and the HVP's ``HvpAnswer`` (value, error bar and its
kink judgements); the dtype a candidate's answer is judged in (``declared_dtype``) and a backend's
gradient, asked for through the guarded call (``gradient``). Their own module, so that the judges and
their screening (which checks failing layers entry by entry into the same records) import it, not
each other."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from crosscheck._compare.constants import ALL_DTYPES, DTYPES
from crosscheck._compare.record import Kinks
from crosscheck._types import Loaded
from crosscheck._workloads.protocol import Call, Outcome
from crosscheck._workloads.stack import rounding


@dataclasses.dataclass(frozen=True)
class GradAnswer:
    """The reference's gradient: value and error bar (``(L, d, d)``), and the oracle's kink flags."""

    value: np.ndarray
    error: np.ndarray
    kink: np.ndarray | None = None
    kink_at: np.ndarray | None = None


@dataclasses.dataclass(frozen=True)
class HvpAnswer:
    """The reference's HVP: value and error bar (``(L, d, d)``), and its kink judgements."""

    value: np.ndarray
    error: np.ndarray
    kinks: Kinks


def oracle_answer(est: Any) -> HvpAnswer:
    """The oracle's ``HvpEstimate`` as the judge's answer: value (NaN where not estimated), error bars
    and kink flags."""
    kinks = Kinks(
        est.kink,
        np.where(est.kink, est.reason, "").astype(object),
        np.broadcast_to(np.array(est.kink_at), (*est.kink.shape, len(rounding.KINK_NAMES))).copy(),
        np.full(est.kink.shape, np.nan),
    )
    return HvpAnswer(est.value, est.error, kinks)


def declared_dtype(backend: Loaded, dtype: str) -> tuple[str, str | None]:
    """The dtype a backend's results are judged in, and an error when crosscheck cannot judge it."""
    try:
        declared = getattr(backend, "output_dtype", None) or dtype
    except Exception as exc:  # a property that raises: the backend's fault, said as such
        return dtype, f"its `output_dtype` raised {type(exc).__name__}: {exc}"
    # A 16-bit output is judged in a 16-bit case only: a float32 case's candidate never picks a
    # coarser dtype's tolerance for itself.
    if declared not in (*DTYPES, dtype if dtype in ALL_DTYPES else "float64"):
        known = " and ".join(DTYPES)
        return dtype, f"declares `output_dtype` {declared!s:.40}; crosscheck judges {known} only"
    return str(declared), None


def gradient(backend: Loaded, call: Call, dtype: str, weights: np.ndarray, x: np.ndarray) -> Outcome:
    """``backend.grad(weights, x)``, guarded, as ``{"weights": array}``; a failure, without a call,
    when the backend declares a dtype crosscheck cannot judge in a ``dtype`` case."""
    _, problem = declared_dtype(backend, dtype)
    if problem:
        return call.failure(problem)
    out = call(backend.grad, weights, x, convert="array")
    return out if out.error else dataclasses.replace(out, value={"weights": out.value})
