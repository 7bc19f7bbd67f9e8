"""Screening the stack's gradient: random directional derivatives per layer, with error bars, then every
entry of each layer that fails them (see README, "Screening")."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import numpy as np

from crosscheck._compare.compare import Comparison, mismatch_message, structural_problem
from crosscheck._workloads.protocol import Call, Reference
from crosscheck._workloads.stack import model as _stack

if TYPE_CHECKING:
    from crosscheck._workloads.stack.judge import StackGradJudge

#: Above this many floating-point operations of matrix products (about 10-20 s here) "auto" screens.
SCREEN_FLOPS = 1.5e11


def full_oracle_flops(layers: int, batch: int, dim: int) -> float:
    """Matrix-product flops of the full oracle: per entry, two evaluations of the layers after it."""
    # sum over k of 2 d^2 (L - 1 - k) 2 N d^2, in closed form (the sum of L - 1 - k is L (L - 1) / 2)
    return float(4 * batch * dim**4 * (layers * (layers - 1) // 2))


def screen_reference(judge: StackGradJudge, backend: Any, call: Call) -> Any:
    """The oracle's directional derivatives along ``directions`` random +-1 directions per layer."""
    shape = judge.weights.shape
    rng = np.random.default_rng(0)  # fixed: the same case is screened along the same directions
    directions = rng.choice([-1.0, 1.0], size=(shape[0], judge.options.directions, shape[1], shape[2]))
    progress = judge._progress("oracle (screening)")
    out = call(backend.screen, judge.weights, judge.x, directions, progress=progress)
    if out.error:
        return out
    judge.screened = out.value
    judge.full_layers.clear()
    notes = {"mode": "screen", "directions": judge.options.directions, "evaluations": out.value.evaluations}
    return dataclasses.replace(out, value=Reference(None, "float64", notes))


def compare_screened(
    judge: StackGradJudge, candidate: np.ndarray, name: str, reference: Reference, dtype: str, call: Call
) -> Comparison:
    """Screen the candidate along the oracle's directions; check failing layers entry by entry."""
    sc = judge.screened
    problem = structural_problem(candidate, judge.weights.shape, dtype)
    if problem:
        return Comparison(
            backend=name, reference=reference.name, passed=False, status="invalid", total=candidate.size,
            message=problem, index_names=list(_stack.INDEX_NAMES),
        )  # fmt: skip
    model = judge.model(dtype)
    assert model.direction_sigma is not None  # the model was made with the screening directions
    projected = np.einsum("kij,ksij->ks", candidate.astype(np.float64), sc.directions)
    u, size = _stack.UNIT_ROUNDOFF[dtype], judge.weights.shape[1]
    options = judge.options
    slack = 0.0 if options.rtol is None else options.atol * size * size + options.rtol * np.abs(sc.value)
    # The floor term of every entry, summed in quadrature over the d * d entries of a direction.
    floor = _stack.SAFETY * u * size * float(np.max(np.abs(candidate), initial=0.0))
    kinks, several = _kink_slack(judge, dtype)
    # The underflow bounds summed over each direction's entries (every entry of a direction is +-1).
    bound = judge.underflow(dtype).grad
    flow = bound.sum(axis=(1, 2))[:, None] if bound.any() else 0.0
    tol = _stack.SAFETY * model.direction_sigma + sc.error + floor + slack + kinks + flow
    diff = np.abs(projected - sc.value)
    failing = sorted({int(k) for k in np.nonzero(diff > tol)[0]} | several)
    coverage = (
        f"screened: {sc.value.shape[0]} layers x {sc.value.shape[1]} random directions; "
        f"layers checked entry by entry: {failing or 'none'}"
    )
    full = _full_layers(judge, failing, reference, call) if failing else None
    if isinstance(full, str):
        comparison = Comparison(backend=name, reference=reference.name, passed=False, status="invalid",
                                total=candidate.size, message=full,
                                index_names=list(_stack.INDEX_NAMES))  # fmt: skip
        message = full
    elif full is not None:
        comparison = judge.compare_full(candidate, name, full, dtype)
        message = coverage + "\n" + mismatch_message(comparison)
    else:
        comparison = Comparison(backend=name, reference=reference.name, passed=True, status="ok",
                                total=candidate.size, index_names=list(_stack.INDEX_NAMES))  # fmt: skip
        message = coverage + ": every direction agrees"
    rounding = {"weights": model.grad_bound + _stack.SAFETY * u * float(np.max(np.abs(candidate), initial=0))}
    return dataclasses.replace(
        comparison,
        coverage=coverage,
        screening=_screening_rows(diff, tol, sc.value.shape[1], failing),
        message=message,
        arrays={**comparison.arrays, "rounding": rounding},
    )


def _screening_rows(diff: np.ndarray, tol: np.ndarray, directions: int, failing: list[int]) -> list[dict]:
    return [
        {
            "layer": k,
            "directions": int(directions),
            "mismatched": int(np.count_nonzero(diff[k] > tol[k])),
            "worst_ratio": float(np.max(np.where(diff[k] == 0, 0.0, diff[k] / tol[k]))),
            "full_check": k in failing,
        }
        for k in range(diff.shape[0])
    ]


def _full_layers(judge: StackGradJudge, layers: list[int], reference: Reference, call: Call) -> Any:
    """The oracle on every entry of ``layers`` (cached across candidates; NaN elsewhere), or why not."""
    from crosscheck._workloads.stack.judge import _Oracle

    missing = [k for k in layers if k not in judge.full_layers]
    if missing:
        progress = judge._progress("oracle (full check)")
        out = call(judge.oracle_backend.estimate, judge.weights, judge.x, layers=missing, progress=progress)
        if out.error:
            return f"the reference failed to check layers {missing} entry by entry: {out.error}"
        est = out.value
        for k in missing:
            judge.full_layers[k] = (est.value[k], est.error[k], est.kink[k], est.kink_at[k])
    shape = judge.weights.shape
    value, error = np.full(shape, np.nan), np.full(shape, np.nan)
    kink, kink_at = np.zeros(shape, bool), np.full((*shape, 3), -1, np.int64)
    for k in layers:
        value[k], error[k], kink[k], kink_at[k] = judge.full_layers[k]
    return dataclasses.replace(reference, data=_Oracle(value, error, kink, kink_at))


def _kink_slack(judge: StackGradJudge, dtype: str) -> tuple[np.ndarray, set[int]]:
    """How far ReLU flips the candidate may see can move each directional derivative, and the
    layers where several flips can move one entry (those are always checked entry by entry)."""
    *_, effects = judge.kink_effects(dtype, judge.model(dtype).grad_bound)
    moved = np.abs(effects.alternative) * (effects.count > 0) + effects.minor
    several = {int(k) for k in np.nonzero(effects.count > 1)[0]}
    return np.einsum("kij,ksij->ks", moved, np.abs(judge.screened.directions)), several
