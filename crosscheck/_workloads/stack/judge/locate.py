"""The gradient judge's locate phase (with ``explain``): where a candidate's disagreement starts, its
forward pass compared layer by layer (``localized``), and what a mismatch is, by controlled re-runs of
the candidate (``classified``, ``explain.classify``). Each is a diagnosis: what fails in it is said in
the record, never a failure of the run.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

from crosscheck._compare.record import Comparison
from crosscheck._records import Oracle
from crosscheck._types import Loaded
from crosscheck._workloads.protocol import Call, Judge, Options, Point, Reference
from crosscheck._workloads.stack.explain import classify, forward_layers, verdict
from crosscheck._workloads.stack.judge.answers import gradient
from crosscheck._workloads.stack.judge.full import compare_full
from crosscheck._workloads.stack.judge.passes import Passes


def localized(passes: Passes, backend: Loaded, comparison: Comparison, dtype: str, call: Call) -> Comparison:
    """``comparison`` with the layer-by-layer forward comparison (when the backend exposes its
    activations)."""
    activations = getattr(backend, "activations", None)
    if not callable(activations) or comparison.status == "invalid":
        return comparison
    out = call(activations, passes.weights, passes.x)
    if out.error:
        forward = [{"error": out.error}]
    else:
        try:
            forward = forward_layers(out.value, passes.fwd, passes.model(dtype))
        except Exception as exc:  # localization is a diagnosis: it must not fail the run
            forward = [{"error": f"{type(exc).__name__}: {exc}"}]
    return dataclasses.replace(comparison, forward=forward)


def classified(
    passes: Passes,
    options: Options,
    backend: Loaded,
    comparison: Comparison,
    value: np.ndarray,
    reference: Reference,
    call: Call,
    *,
    dtype: str,
    nudged: Callable[[Any], bool],
) -> Comparison:
    """``comparison`` (a mismatch of the full check) with its classification: the candidate re-run
    under controlled changes, each re-run judged as the first (``dtype``: the case's)."""
    answer = reference.data.answer

    def grad(weights: np.ndarray, x: np.ndarray) -> np.ndarray:
        out = gradient(backend, call, dtype, weights, x)
        if out.error:
            raise RuntimeError(out.error)
        return out.value["weights"]

    def rerun(new_value: np.ndarray, judged_in: str) -> Comparison:
        return compare_full(passes, options, new_value, comparison.backend, reference.name, answer, judged_in)

    localized = verdict(comparison.forward, comparison.per_layer)
    args = (backend, grad, passes.weights, passes.x, value, rerun, localized, nudged)
    out = call(classify, *args)  # a diagnosis is guarded too: it must not fail the run
    found = out.value if out.ok else {"verdict": "unclassified", "evidence": [f"a re-run: {out.error}"]}
    return dataclasses.replace(comparison, classification=found)


def nudged(
    point: Point, oracle: Any, call: Call, judge: Callable[[Point, Options], Judge], *, mode: str = "full"
) -> Callable[[Any], bool]:
    """A check of a candidate on ``point``'s weights moved ~1e-3 off every kink, against the same
    reference (``oracle``) asked the same way (``mode``: the first check's, ``full`` or ``outputs``;
    the full oracle where the first took the outputs' would take hours at width), by a fresh
    ``judge`` of the moved point."""

    def check(backend: Loaded) -> bool:
        # Integer or near-zero inputs put pre-activations on kinks; a relative nudge of ~1e-3 of the
        # weights moves them off (the same case, up to a perturbation far above rounding).
        weights, x = point.params["weights"], point.inputs["x"]
        rng = np.random.default_rng(1)
        scale = 1e-3 * float(np.sqrt(np.mean(weights.astype(np.float64) ** 2)) or 1.0)
        moved = (weights + scale * rng.standard_normal(weights.shape)).astype(point.dtype)
        moved_point = Point({"weights": moved}, {"x": x.copy()}, point.case, point.dtype)
        fresh = judge(moved_point, Options(oracle=Oracle(mode)))
        ref, out = fresh.reference(oracle, call), fresh.evaluate(backend, call)
        if ref.error or out.error:
            return False
        found = fresh.compare(backend, out.value, "nudged", ref.value, call)
        return all(c.passed for c in found)

    return check
