"""``crosscheck ste``: the ``ste-stack`` workload checked like any workload, and the naive finite
difference of the rounded loss beside it (it gives zeros, and why)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from crosscheck._report.report import Report
from crosscheck._workloads.ste_stack import (
    DEFAULT_SHAPE,
    GRID,
    WHY_SURROGATE,
    offsets,
    rounded_losses,
    ste_stack,
)

#: Perturbed weight sets the naive check evaluates at once (bounds its memory).
BATCH = 256
WHY_NAIVE = (
    "a finite difference of the rounded loss itself gives zeros: the loss is piecewise constant (a small "
    "step leaves every rounded activation, hence the loss, unchanged), so it is the exact derivative of "
    "the function computed, and not the gradient the backends were written to produce"
)


def naive_gradient(loss_batch: Callable[[np.ndarray], np.ndarray], weights: np.ndarray, *, step: float):
    """What a naive check does: one central difference per entry with a small step."""
    base = np.asarray(weights, np.float64)
    eye = np.eye(base.size).reshape(base.size, *base.shape) * step
    pieces = np.array_split(eye, max(1, base.size // BATCH))
    plus = np.concatenate([loss_batch(base + e) for e in pieces])
    minus = np.concatenate([loss_batch(base - e) for e in pieces])
    return ((plus - minus) / (2 * step)).reshape(base.shape)


@dataclasses.dataclass(frozen=True)
class SteReport:
    """The outcome of ``check_ste``: the workload report (the backends against the surrogate oracle)
    and the naive finite difference of the rounded loss beside it."""

    report: Report
    naive: dict[str, Any]

    @property
    def passed(self) -> bool:
        return self.report.passed

    def to_dict(self) -> dict[str, Any]:
        """The workload's JSON report, plus ``"naive_finite_difference"`` and ``"straight_through"``."""
        return {
            **self.report.to_dict(),
            "straight_through": {"grid": 1 / GRID, "oracle": WHY_SURROGATE},
            "naive_finite_difference": self.naive,
        }


def check_ste(
    *, seed: int = 0, dtype: str = "float32", backends: Sequence[Any] = ("jax", "torch"), **shape: int
) -> SteReport:
    """Cross-check the STE stack: every backend against the surrogate oracle, through the generic
    workload driver (``crosscheck.run(workload=ste_stack(...))``), and the naive finite difference of
    the rounded loss beside it.

    Args:
        seed, dtype: the case (inputs from ``ste_stack(**shape).make``).
        backends: ``"jax"``, ``"torch"``, or anything ``crosscheck.run(workload=...)`` takes (e.g. a
            function ``grad(params, inputs) -> {"weights": ...}``).
        shape: ``layers``, ``batch``, ``dim`` (default 4, 8, 8).
    """
    from crosscheck._engine.run import run

    shape = {**DEFAULT_SHAPE, **shape}
    workload = ste_stack(**shape)
    report = run(workload=workload, seed=seed, dtype=dtype, backends=list(backends))
    params, inputs = workload.make(seed=seed, dtype=dtype)
    weights, x = params["weights"], inputs["x"]
    rms = float(np.sqrt(np.mean(weights.astype(np.float64) ** 2)))
    naive = naive_gradient(lambda w: rounded_losses(w, x), weights, step=NAIVE_STEP * rms)
    record = {
        "method": "one central difference of the rounded loss per entry, step 2**-20 x the weights' RMS",
        "max_abs": float(np.max(np.abs(naive))),
        "zero_entries": int(np.count_nonzero(naive == 0)),
        "total": int(naive.size),
        "rounded_activations": int(np.count_nonzero(offsets(weights, x))),
        "why": WHY_NAIVE,
    }
    surrogate_grad = report.gradients.get(report.reference, {}).get("weights")
    if surrogate_grad is not None:
        record["max_abs_diff_from_reference"] = float(np.max(np.abs(naive - surrogate_grad)))
    return SteReport(report, record)


#: The naive check's step, relative to the weights' RMS.
NAIVE_STEP = 2.0**-20
