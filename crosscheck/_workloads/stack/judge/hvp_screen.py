"""Screening the stack's HVP: random directional derivatives of ``H v`` per layer, with error bars, then
every entry of each layer that fails them (see docs/explanations/hvp-screening.md).

As for the gradient (``screen``): ``S`` random +-1 directions ``D[k, s]`` per layer; the oracle gives
``D[k, s] . (H v)[k]`` from its screened derivatives at the HVP's nodes (``hvp.oracle_hvp_screen``),
the candidate's ``H v`` is projected on the same directions, and a layer with a direction beyond its
tolerance, or one the oracle cannot judge, is checked entry by entry with the full HVP oracle.

The HVP judge owns a ``Screening`` (the gradient's: what the oracle screened, and the full checks every
candidate shares) and hands it, with itself, to ``compare_screened``; this module uses the judge's
public surface only (``HvpJudge``: ``weights``, ``x``, ``v``, ``dtype``, ``options``, ``rerun``,
``compare_full``), and imports neither the judge nor its module.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol

import numpy as np

from crosscheck._compare import screening as _screening
from crosscheck._compare import terms
from crosscheck._compare.compare import structural_problem
from crosscheck._compare.constants import UNIT_ROUNDOFF
from crosscheck._compare.message import mismatch_message
from crosscheck._compare.record import Comparison, Kinks
from crosscheck._types import Loaded
from crosscheck._workloads.protocol import Call, Options, Reference
from crosscheck._workloads.stack.judge import cost
from crosscheck._workloads.stack.judge.answers import HvpAnswer, declared_dtype, oracle_answer
from crosscheck._workloads.stack.judge.directions import DIRECTIONS_GENERATOR, sign_directions
from crosscheck._workloads.stack.judge.screen import screening_rows
from crosscheck._workloads.stack.judge.screening import Screening
from crosscheck._workloads.stack.oracle import hvp as _hvp


class HvpJudge(Protocol):
    """What screening uses of the HVP judge (``hvp.StackHvpJudge``)."""

    weights: np.ndarray
    x: np.ndarray
    v: np.ndarray
    dtype: str
    options: Options

    def rerun(self, backend: Loaded, call: Call) -> tuple[np.ndarray | None, str]: ...
    def compare_full(
        self,
        backend: Loaded,
        candidate: np.ndarray,
        name: str,
        reference: Reference,
        rerun: np.ndarray,
        note: str,
    ) -> Comparison: ...


#: Help text of the screening's ``rerun`` term.
RERUN_HELP = terms.measured_help(
    "the candidate's own rounding along each direction",
    "|D . (its HVP - its HVP re-run in the other precision)|",
    "||D|| x that difference's RMS over the layer",
    then=", scaled as for the full check",
)


def hvp_oracle_flops(layers: int, batch: int, dim: int) -> float:
    """Matrix-product flops of the full HVP oracle: the gradient oracle's at each of the 2L nodes."""
    return 2 * layers * cost.full_oracle_flops(layers, batch, dim)


def mode(judge: HvpJudge, backend: Loaded) -> str:
    """``full`` or ``screen``: what ``oracle_mode`` asks for, given what the reference can do."""
    can_screen = callable(getattr(backend, "hvp_screen", None))
    asked = judge.options.oracle.mode
    if asked == "screen" and not can_screen:
        raise ValueError("`oracle_mode` 'screen' needs a reference that can screen (the numpy-fd oracle).")
    if asked == "auto":
        shape = judge.weights.shape
        flops = hvp_oracle_flops(shape[0], judge.x.shape[0], shape[1])
        return "screen" if can_screen and flops > cost.SCREEN_FLOPS else "full"
    return asked


def screen_reference(judge: HvpJudge, backend: Loaded, call: Call) -> tuple[Any, Screening | None]:
    """The oracle's ``D . H v`` along ``directions`` random +-1 directions per layer: the reference's
    outcome, and the judge's ``Screening`` (None when the oracle failed)."""
    shape = judge.weights.shape
    directions = sign_directions(shape[0], judge.options.oracle.directions, shape[1])
    out = call(backend.hvp_screen, judge.weights, judge.x, judge.v, directions)
    if out.error:
        return out, None
    est = out.value
    notes = {
        "mode": "screen",
        "directions": judge.options.oracle.directions,
        "directions_generator": DIRECTIONS_GENERATOR,
        "kink_radius": est.radius,
        "kink_radius_at": list(est.kink_at),
        "nodes": len(est.nodes),
        "largest_node": float(np.max(np.abs(est.nodes), initial=0.0)),
        "evaluations": est.evaluations,
    }
    return dataclasses.replace(out, value=Reference(None, "float64", notes)), Screening(est, backend)


def compare_screened(
    judge: HvpJudge,
    screening: Screening,
    backend: Loaded,
    candidate: np.ndarray,
    name: str,
    reference: Reference,
    call: Call,
) -> Comparison:
    """Screen the candidate's HVP along the oracle's directions; check failing layers entry by entry."""
    sc = screening.estimate
    dtype, _ = declared_dtype(backend, judge.dtype)
    problem = structural_problem(candidate, judge.weights.shape, dtype)
    if problem:
        return _record(name, reference, candidate, False, "invalid", problem)
    again, note = judge.rerun(backend, call)
    rerun, note = _hvp.rerun_term(candidate, again, judge.dtype) if again is not None else (0.0, note)
    tol = (
        sc.error
        + _rerun_along(candidate, again, sc.directions, judge.dtype)
        + _floor_and_slack(judge, sc, candidate)
    )
    diff = np.abs(np.einsum("kij,ksij->ks", candidate.astype(np.float64), sc.directions) - sc.value)
    # A direction the oracle cannot judge sends its layer to the full check (which says why).
    diff, tol = np.where(sc.kink, 0.0, diff), np.where(sc.kink, np.inf, tol)
    failing = _screening.escalated((diff > tol) | sc.kink)
    coverage = _screening.coverage(sc.value.shape[0], "layer", sc.value.shape[1], failing)
    rerun = np.broadcast_to(rerun, candidate.shape)
    full = _full_layers(judge, screening, failing, reference, call) if failing else None
    if isinstance(full, str):
        comparison, message = _record(name, reference, candidate, False, "invalid", full), full
    elif full is not None:
        comparison = judge.compare_full(backend, candidate, name, full, rerun, note)
        message = coverage + "\n" + mismatch_message(comparison)
    else:
        comparison = _record(name, reference, candidate, True, "ok", "")
        message = f"{coverage}: {_screening.AGREES}"
    u = UNIT_ROUNDOFF[judge.dtype]
    floor = terms.floor(terms.largest(candidate), u, ulps=terms.SAFETY_FLOOR_ULPS)
    sources = {**comparison.tolerance_sources, "rerun": f"{RERUN_HELP} ({note})"}
    return dataclasses.replace(
        comparison,
        coverage=coverage,
        screening=screening_rows(diff, tol, failing, ~sc.kink),
        message=message,
        tolerance_sources=sources,
        arrays={**comparison.arrays, "rounding": {"weights": rerun + floor}},
    )


def _record(name: str, reference: Reference, candidate: np.ndarray, passed: bool, status: str, message: str):
    return Comparison(
        backend=name,
        reference=reference.name,
        passed=passed,
        status=status,
        total=candidate.size,
        message=message,
    )


def _rerun_along(candidate: np.ndarray, again: np.ndarray | None, directions: np.ndarray, dtype: str):
    """The ``rerun`` term along each direction: the measured difference between the candidate's two
    precisions, projected (``|D . delta|``), guarded by ``||D|| x RMS(delta)`` (what a random-sign sum
    of the layer's differences typically is, in case the projection cancels by chance), times SAFETY and
    the unit-roundoff ratio; without a usable re-run, the full check's fallback summed with ``|D|``."""
    if again is None or not _hvp.rerun_usable(candidate, again, dtype):
        return np.einsum("kij,ksij->ks", _hvp.rerun_fallback(candidate, dtype), np.abs(directions))
    delta, _ = _hvp.measured_delta(candidate, again, dtype)
    rms = np.sqrt(np.mean(delta**2, axis=(1, 2)))
    norm = np.sqrt(np.einsum("ksij,ksij->ks", directions, directions))
    along = np.abs(np.einsum("kij,ksij->ks", delta, directions))
    return terms.measured(along, norm * rms[:, None], widen=terms.widening(dtype))


def _floor_and_slack(judge: HvpJudge, sc: Any, candidate: np.ndarray) -> np.ndarray:
    """The floor term of every entry summed in quadrature over a direction (``||D||``), and the user's
    slack summed over its entries (``sc``: the oracle's screened estimate)."""
    u, size = UNIT_ROUNDOFF[judge.dtype], judge.weights.shape[1]
    norm = np.sqrt(np.einsum("ksij,ksij->ks", sc.directions, sc.directions))
    floor = terms.floor(terms.largest(candidate), u, ulps=terms.SAFETY_FLOOR_ULPS, across=norm)
    given = judge.options.slack
    slack = 0.0 if given is None else given.atol * size * size + given.rtol * np.abs(sc.value)
    return floor + slack


def _full_layers(
    judge: HvpJudge, screening: Screening, layers: list[int], reference: Reference, call: Call
) -> Reference | str:
    """The full HVP oracle on every entry of ``layers`` (cached across candidates; NaN elsewhere), or
    why it failed."""
    missing = [k for k in layers if k not in screening.full_layers]
    if missing:
        out = call(screening.oracle.hvp_estimate, judge.weights, judge.x, judge.v, layers=missing)
        if out.error:
            return f"the reference failed to check layers {missing} entry by entry: {out.error}"
        answer = oracle_answer(out.value)
        for k in missing:
            kinks = answer.kinks
            screening.full_layers[k] = (
                answer.value[k],
                answer.error[k],
                kinks.unjudgeable[k],
                kinks.reason[k],
                kinks.kink[k],
            )
    shape = judge.weights.shape
    value, error = np.full(shape, np.nan), np.full(shape, np.nan)
    unjudgeable, reason = np.zeros(shape, bool), np.full(shape, "", object)
    kink = np.full((*shape, 3), -1, np.int64)
    for k in layers:
        value[k], error[k], unjudgeable[k], reason[k], kink[k] = screening.full_layers[k]
    kinks = Kinks(unjudgeable, reason, kink, np.full(shape, np.nan))
    return dataclasses.replace(reference, data=HvpAnswer(value, error, kinks))
