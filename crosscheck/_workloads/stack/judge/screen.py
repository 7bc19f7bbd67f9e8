"""Screening the stack's gradient: a candidate's directional derivatives per layer against the oracle's,
with error bars, then every entry of each layer that fails them (``compare_screened``); ``spot`` then
checks the others' largest entries one by one.

The reference's phase hands on the oracle's ``Screening`` (what it screened, and what every candidate
shares); this module takes it with the passes the candidate is judged on (``Passes``) and the run's
options, and fills in what each dtype is screened along (``Along``) and the layers it checked entry by
entry, once for every candidate.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from crosscheck._compare import screening as _screening
from crosscheck._compare import terms
from crosscheck._compare.compare import structural_problem
from crosscheck._compare.constants import UNIT_ROUNDOFF
from crosscheck._compare.dtypes import accumulation
from crosscheck._compare.message import mismatch_message
from crosscheck._compare.record import Comparison
from crosscheck._workloads.protocol import Call, Options, Reference
from crosscheck._workloads.stack import rounding
from crosscheck._workloads.stack.judge import cost
from crosscheck._workloads.stack.judge.answers import GradAnswer
from crosscheck._workloads.stack.judge.directions import project
from crosscheck._workloads.stack.judge.full import compare_full
from crosscheck._workloads.stack.judge.passes import Passes
from crosscheck._workloads.stack.judge.reference import progress
from crosscheck._workloads.stack.judge.screening import Along, Screening


def compare_screened(
    passes: Passes,
    options: Options,
    screening: Screening,
    candidate: np.ndarray,
    name: str,
    reference: Reference,
    dtype: str,
    call: Call,
) -> Comparison:
    """Screen the candidate along the oracle's directions; check failing layers entry by entry."""
    sc = screening.estimate
    problem = structural_problem(candidate, passes.weights.shape, dtype)
    if problem:
        invalid = _invalid(candidate, name, reference, problem)
        return passes.range_cause(invalid, candidate, dtype)
    along = _along(passes, options, screening, dtype, call)
    # The reference's record counts every screen's evaluations (the engine reads its notes once more
    # for the report).
    reference.notes["evaluations"] = sc.evaluations + screening.more_evaluations
    if isinstance(along, str):
        return _invalid(candidate, name, reference, along)
    model = passes.model(dtype)
    projected = project(candidate, along.directions)
    u = UNIT_ROUNDOFF[accumulation(dtype)]
    tol = _tolerance(passes, options, candidate, along, dtype)
    diff = np.abs(projected - along.value)
    failing = _screening.escalated(diff > tol)
    layers, batch, dim = len(passes.weights), len(passes.x), passes.weights.shape[1]
    flops = cost.escalation_flops(layers, batch, dim, failing)
    if failing and flops > cost.ESCALATE_FLOPS:  # the candidate fails on its directions alone
        left = _left_out(int(np.count_nonzero(along.unjudgeable)), dtype)
        return _on_directions(candidate, name, reference, (diff, tol), failing, flops, model, u, left)
    coverage = _screening.coverage(sc.value.shape[0], "layer", sc.value.shape[1], failing)
    unjudged = int(np.count_nonzero(along.unjudgeable))
    coverage += _left_out(unjudged, dtype)
    full = _full_layers(passes, options, screening, failing, call) if failing else None
    if isinstance(full, str):
        comparison = _invalid(candidate, name, reference, full)
        message = full
    elif full is not None:
        comparison = compare_full(passes, options, candidate, name, reference.name, full, dtype)
        message = coverage + "\n" + mismatch_message(comparison)
    else:
        # Every direction agrees; the entries several flips may move were left out of them, and are
        # unjudgeable, as a full check says of them (``--strict`` fails them).
        strict = bool(options.strict and unjudged)
        comparison = Comparison(
            backend=name,
            reference=reference.name,
            passed=not strict,
            status="mismatch" if strict else "ok",
            total=candidate.size,
            index_names=list(rounding.INDEX_NAMES),
            unjudgeable=unjudged,
            unjudgeable_reasons={_several(dtype): unjudged} if unjudged else {},
        )
        message = f"{coverage}: {_screening.AGREES}" + ("; --strict fails them" if strict else "")
    own_floor = terms.floor(terms.largest(candidate), u, ulps=terms.SAFETY_FLOOR_ULPS)
    own = {"weights": model.grad_bound + own_floor}
    return dataclasses.replace(
        comparison,
        coverage=coverage,
        screening=screening_rows(diff, tol, failing),
        message=message,
        arrays={**comparison.arrays, "rounding": own},
    )


def _tolerance(
    passes: Passes, options: Options, candidate: np.ndarray, along: Along, dtype: str
) -> np.ndarray:
    """Each direction's tolerance: the modelled rounding along it, the oracle's error, the candidate's
    floor, the user's slack, the kinks' slack and the underflow bounds."""
    u, size = UNIT_ROUNDOFF[accumulation(dtype)], passes.weights.shape[1]
    given = options.slack
    slack = 0.0 if given is None else given.atol * size * size + given.rtol * np.abs(along.value)
    # The floor term of every entry, summed in quadrature over the d * d entries of a direction.
    floor = terms.floor(terms.largest(candidate), u, ulps=terms.SAFETY_FLOOR_ULPS, across=size)
    # The underflow bounds summed over each direction's entries (every entry of a direction is +-1,
    # or 0 where it is left out as unjudgeable).
    bound = passes.underflow(dtype).grad
    flow = (bound * ~along.unjudgeable).sum(axis=(1, 2))[:, None] if bound.any() else 0.0
    return terms.modelled(along.sigma) + along.error + floor + slack + along.slack + flow


def _invalid(candidate: np.ndarray, name: str, reference: Reference, message: str) -> Comparison:
    """A candidate the screen could not judge (its shape, its directions or its layers' full check
    failed): an invalid comparison saying why."""
    return Comparison(
        backend=name,
        reference=reference.name,
        passed=False,
        status="invalid",
        total=candidate.size,
        message=message,
        index_names=list(rounding.INDEX_NAMES),
    )


def _on_directions(
    candidate: np.ndarray,
    name: str,
    reference: Reference,
    found: tuple[np.ndarray, np.ndarray],
    failing: list[int],
    flops: float,
    model: rounding.RoundingModel,
    u: float,
    left: str = "",
) -> Comparison:
    """A candidate whose directions disagree where checking their layers entry by entry would cost
    ``flops`` (over ``cost.ESCALATE_FLOPS``): a mismatch on its directions, with the worst one."""
    diff, tol = found
    count = diff.shape[1]
    coverage = _screening.coverage(len(diff), "layer", count, []) + left
    ratio = _screening.ratio(diff, tol)
    k, s = (int(i) for i in np.unravel_index(np.nanargmax(np.where(diff > tol, ratio, -1.0)), diff.shape))
    worst = f"worst: layer {k}, direction {s}, off by {diff[k, s]:.3g}, {ratio[k, s]:.3g} x its tolerance"
    message = (
        f"{coverage}; the directions of layers {failing} disagree ({worst}); checking those layers "
        f"entry by entry would take about {flops:.1e} flops (more than {cost.ESCALATE_FLOPS:.1e}), so the "
        "candidate fails on its directions; --oracle-mode full checks every entry"
    )
    own_floor = terms.floor(terms.largest(candidate), u, ulps=terms.SAFETY_FLOOR_ULPS)
    return Comparison(
        backend=name,
        reference=reference.name,
        passed=False,
        status="mismatch",
        total=candidate.size,
        index_names=list(rounding.INDEX_NAMES),
        coverage=coverage,
        screening=screening_rows(diff, tol, []),
        message=message,
        arrays={"rounding": {"weights": model.grad_bound + own_floor}},
    )


def layer_directions(diff: np.ndarray, tol: np.ndarray, judged: np.ndarray | None = None) -> list:
    """Each layer's verdict along its directions (``diff``, ``tol``: layers x directions; ``judged``:
    the directions the oracle judged, every one unless given). A direction fails beyond its tolerance
    (``diff > tol``: a NaN tolerance fails none, as screening always has)."""
    judged = np.ones(diff.shape, bool) if judged is None else judged
    return [_screening.Directions(diff[k], tol[k], judged[k], diff[k] > tol[k]) for k in range(len(diff))]


def screening_rows(
    diff: np.ndarray, tol: np.ndarray, failing: list[int], judged: np.ndarray | None = None
) -> list[dict]:
    """One row per layer for the report (``screening.row``): its directions, how many failed, the
    worst diff / tol, whether it was checked entry by entry."""
    layers = layer_directions(diff, tol, judged)
    return [_screening.row("layer", k, found, k in failing) for k, found in enumerate(layers)]


def _full_layers(
    passes: Passes, options: Options, screening: Screening, layers: list[int], call: Call
) -> GradAnswer | str:
    """The oracle on every entry of ``layers`` (cached across candidates; NaN elsewhere), or why not."""
    missing = [k for k in layers if k not in screening.full_layers]
    if missing:
        told = progress(options, "oracle (full check)")
        out = call(screening.oracle.estimate, passes.weights, passes.x, layers=missing, progress=told)
        if out.error:
            return f"the reference failed to check layers {missing} entry by entry: {out.error}"
        est = out.value
        for k in missing:
            screening.full_layers[k] = (est.value[k], est.error[k], est.kink[k], est.kink_at[k])
    shape = passes.weights.shape
    value, error = np.full(shape, np.nan), np.full(shape, np.nan)
    kink, kink_at = np.zeros(shape, bool), np.full((*shape, 3), -1, np.int64)
    for k in layers:
        value[k], error[k], kink[k], kink_at[k] = screening.full_layers[k]
    return GradAnswer(value, error, kink, kink_at)


def _left_out(unjudged: int, dtype: str) -> str:
    """What a screen's coverage adds for the entries left out of its directions ("" when none)."""
    if not unjudged:
        return ""
    return f"; {unjudged} entries left out of the directions, unjudgeable ({_several(dtype)})"


def _several(dtype: str) -> str:
    """Why an entry several ReLU flips may move is unjudgeable (as the full check says it)."""
    return f"{dtype} rounding may flip several ReLUs"


def _along(passes: Passes, options: Options, screening: Screening, dtype: str, call: Call) -> Along | str:
    """What ``dtype``'s candidates are screened along (computed once per dtype), or why not.

    An entry that several ReLU flips may move is unjudgeable (the full check says so of it too), and
    its possible moves have no bound a direction could carry: it is left out of every direction of its
    layer (its sign set to 0), and the oracle's derivatives, and the rounding's spread, are taken along
    those directions instead. That costs one more screen, never a layer's entries one by one."""
    if dtype not in screening.along:
        # The model's bound is its modelled term of sigma: passed as sigma and the term's scale
        # (``terms.modelled(1.0)``; no (L, d, d) bound made).
        *_, effects = passes.kink_effects(dtype, passes.model(dtype).grad_sigma, terms.modelled(1.0))
        unjudgeable = effects.count > 1
        sc, model = screening.estimate, passes.model(dtype)
        assert model.direction_sigma is not None  # the model was made with the screening directions
        directions, value, error, sigma = sc.directions, sc.value, sc.error, model.direction_sigma
        if unjudgeable.any():
            directions = directions * ~unjudgeable[:, None]
        slack = np.zeros(directions.shape[:2])
        for k in range(len(slack)):  # a layer at a time; most layers have no kink at all
            moved = np.abs(effects.alternative[k]) * (effects.count[k] > 0)
            moved += effects.minor[k]  # 0 where left out
            if moved.any():
                slack[k] = project(moved[None], np.abs(directions[k : k + 1]))[0]
        del effects, moved
        layers, batch, dim = len(passes.weights), len(passes.x), passes.weights.shape[1]
        if not cost.escalates(layers, batch, dim):  # no full check will judge these kinks again
            passes.forget_kinks(dtype)
        if unjudgeable.any():
            told = progress(options, "oracle (screening judgeable entries)")
            oracle = screening.oracle.screen
            out = call(oracle, passes.weights, passes.x, directions, progress=told, keep_model=False)
            if out.error:
                why = f"the reference failed to screen the entries {dtype} rounding leaves judgeable"
                screening.along[dtype] = f"{why}: {out.error}"
                return screening.along[dtype]
            value, error = out.value.value, out.value.error
            screening.more_evaluations += out.value.evaluations
            fwd, deltas = passes.fwd, passes.deltas
            masked = rounding.rounding_model(fwd, deltas, dtype, directions=directions, entries=False)
            assert masked.direction_sigma is not None  # the model was given the directions
            sigma = masked.direction_sigma
        screening.along[dtype] = Along(directions, value, error, sigma, slack, unjudgeable)
    return screening.along[dtype]
