"""Screening the stack's gradient: random directional derivatives per layer, with error bars, then every
entry of each layer that fails them; ``spot`` then checks the others' largest entries one by one.

The gradient judge owns a ``Screening`` (what the oracle screened, and what every candidate shares) and
hands it, with itself, to ``compare_screened``; this module uses the judge's public surface only
(``GradJudge``: ``weights``, ``x``, ``options``, ``model``, ``underflow``, ``kink_effects``,
``forget_kinks``, ``compare_full``, ``range_cause``, ``progress``), and imports neither the judge nor
its module.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol

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
from crosscheck._workloads.stack import underflow as _underflow
from crosscheck._workloads.stack.forward import Forward
from crosscheck._workloads.stack.judge import cost
from crosscheck._workloads.stack.judge.answers import GradAnswer
from crosscheck._workloads.stack.judge.directions import DIRECTIONS_GENERATOR, SIGNS, project, sign_directions


class GradJudge(Protocol):
    """What screening uses of the gradient judge (``grad.StackGradJudge``)."""

    weights: np.ndarray
    x: np.ndarray
    options: Options
    fwd: Forward
    deltas: list[np.ndarray]

    def model(self, dtype: str) -> rounding.RoundingModel: ...
    def underflow(self, dtype: str) -> _underflow.Underflow: ...
    def kink_effects(self, dtype: str, tol: np.ndarray, scale: float = 1.0) -> Any: ...
    def forget_kinks(self, dtype: str) -> None: ...
    def compare_full(self, value: np.ndarray, name: str, reference: Reference, dtype: str) -> Comparison: ...
    def range_cause(self, found: Comparison, value: np.ndarray, dtype: str) -> Comparison: ...
    def progress(self, description: str) -> Any: ...


@dataclasses.dataclass(frozen=True)
class Along:
    """What one dtype's candidates are screened along: the directions (the screen's, less the entries
    that several ReLU flips may move, which are unjudgeable), the oracle's derivatives along them and
    their error, the modelled spread of the dtype's rounding along them, the kink slack, and the
    unjudgeable entries (``(L, d, d)`` bool)."""

    directions: np.ndarray
    value: np.ndarray
    error: np.ndarray
    sigma: np.ndarray
    slack: np.ndarray
    unjudgeable: np.ndarray


@dataclasses.dataclass
class Screening:
    """A judge's screening: the oracle's directional derivatives (``estimate``: value, error, directions),
    the oracle that checks failing layers entry by entry, those checks by layer and what each dtype is
    screened along (each computed once, shared by every candidate)."""

    estimate: Any
    oracle: Any
    #: The full checks by layer: (value, error, kink, kink_at).
    full_layers: dict[int, tuple[np.ndarray, ...]] = dataclasses.field(default_factory=dict)
    #: What each dtype is screened along (``Along``), or why the oracle could not screen it.
    along: dict[str, Along | str] = dataclasses.field(default_factory=dict)
    #: The oracle's evaluations after its first screen (its screens of the judgeable entries, its spots).
    more_evaluations: int = 0
    #: The spot check's memo (``spot``): the oracle at single entries, by ``(layer, row, col)``, and
    #: its kink judgements, by what each was made for (shared with a view held at a pattern).
    spots: dict[tuple, Any] = dataclasses.field(default_factory=dict)

    @property
    def directions(self) -> np.ndarray:
        return self.estimate.directions


def screen_reference(judge: GradJudge, backend: Any, call: Call) -> tuple[Any, Screening | None]:
    """The oracle's directional derivatives along ``directions`` random +-1 directions per layer: the
    reference's outcome, and the judge's ``Screening`` (None when the oracle failed)."""
    shape = judge.weights.shape
    directions = sign_directions(shape[0], judge.options.oracle.directions, shape[1], SIGNS)
    progress = judge.progress("oracle (screening)")
    out = call(backend.screen, judge.weights, judge.x, directions, progress=progress)
    if out.error:
        return out, None
    screening = Screening(out.value, backend)
    notes = {
        "mode": "screen",
        "directions": judge.options.oracle.directions,
        "directions_generator": DIRECTIONS_GENERATOR,
        "evaluations": out.value.evaluations,
    }
    return dataclasses.replace(out, value=Reference(None, "float64", notes)), screening


def compare_screened(
    judge: GradJudge,
    screening: Screening,
    candidate: np.ndarray,
    name: str,
    reference: Reference,
    dtype: str,
    call: Call,
) -> Comparison:
    """Screen the candidate along the oracle's directions; check failing layers entry by entry."""
    sc = screening.estimate
    problem = structural_problem(candidate, judge.weights.shape, dtype)
    if problem:
        invalid = _invalid(candidate, name, reference, problem)
        return judge.range_cause(invalid, candidate, dtype)
    along = _along(judge, screening, dtype, call)
    # The reference's record counts every screen's evaluations (the engine reads its notes once more
    # for the report).
    reference.notes["evaluations"] = sc.evaluations + screening.more_evaluations
    if isinstance(along, str):
        return _invalid(candidate, name, reference, along)
    model = judge.model(dtype)
    projected = project(candidate, along.directions)
    u = UNIT_ROUNDOFF[accumulation(dtype)]
    tol = _tolerance(judge, candidate, along, dtype)
    diff = np.abs(projected - along.value)
    failing = _screening.escalated(diff > tol)
    layers, batch, dim = len(judge.weights), len(judge.x), judge.weights.shape[1]
    flops = cost.escalation_flops(layers, batch, dim, failing)
    if failing and flops > cost.ESCALATE_FLOPS:  # the candidate fails on its directions alone
        left = _left_out(int(np.count_nonzero(along.unjudgeable)), dtype)
        return _on_directions(candidate, name, reference, (diff, tol), failing, flops, model, u, left)
    coverage = _screening.coverage(sc.value.shape[0], "layer", sc.value.shape[1], failing)
    unjudged = int(np.count_nonzero(along.unjudgeable))
    coverage += _left_out(unjudged, dtype)
    full = _full_layers(judge, screening, failing, reference, call) if failing else None
    if isinstance(full, str):
        comparison = _invalid(candidate, name, reference, full)
        message = full
    elif full is not None:
        comparison = judge.compare_full(candidate, name, full, dtype)
        message = coverage + "\n" + mismatch_message(comparison)
    else:
        # Every direction agrees; the entries several flips may move were left out of them, and are
        # unjudgeable, as a full check says of them (``--strict`` fails them).
        strict = bool(judge.options.strict and unjudged)
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


def _tolerance(judge: GradJudge, candidate: np.ndarray, along: Along, dtype: str) -> np.ndarray:
    """Each direction's tolerance: the modelled rounding along it, the oracle's error, the candidate's
    floor, the user's slack, the kinks' slack and the underflow bounds."""
    u, size = UNIT_ROUNDOFF[accumulation(dtype)], judge.weights.shape[1]
    given = judge.options.slack
    slack = 0.0 if given is None else given.atol * size * size + given.rtol * np.abs(along.value)
    # The floor term of every entry, summed in quadrature over the d * d entries of a direction.
    floor = terms.floor(terms.largest(candidate), u, ulps=terms.SAFETY_FLOOR_ULPS, across=size)
    # The underflow bounds summed over each direction's entries (every entry of a direction is +-1,
    # or 0 where it is left out as unjudgeable).
    bound = judge.underflow(dtype).grad
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
    judge: GradJudge, screening: Screening, layers: list[int], reference: Reference, call: Call
) -> Any:
    """The oracle on every entry of ``layers`` (cached across candidates; NaN elsewhere), or why not."""
    missing = [k for k in layers if k not in screening.full_layers]
    if missing:
        progress = judge.progress("oracle (full check)")
        out = call(screening.oracle.estimate, judge.weights, judge.x, layers=missing, progress=progress)
        if out.error:
            return f"the reference failed to check layers {missing} entry by entry: {out.error}"
        est = out.value
        for k in missing:
            screening.full_layers[k] = (est.value[k], est.error[k], est.kink[k], est.kink_at[k])
    shape = judge.weights.shape
    value, error = np.full(shape, np.nan), np.full(shape, np.nan)
    kink, kink_at = np.zeros(shape, bool), np.full((*shape, 3), -1, np.int64)
    for k in layers:
        value[k], error[k], kink[k], kink_at[k] = screening.full_layers[k]
    return dataclasses.replace(reference, data=GradAnswer(value, error, kink, kink_at))


def _left_out(unjudged: int, dtype: str) -> str:
    """What a screen's coverage adds for the entries left out of its directions ("" when none)."""
    if not unjudged:
        return ""
    return f"; {unjudged} entries left out of the directions, unjudgeable ({_several(dtype)})"


def _several(dtype: str) -> str:
    """Why an entry several ReLU flips may move is unjudgeable (as the full check says it)."""
    return f"{dtype} rounding may flip several ReLUs"


def _along(judge: GradJudge, screening: Screening, dtype: str, call: Call) -> Along | str:
    """What ``dtype``'s candidates are screened along (computed once per dtype), or why not.

    An entry that several ReLU flips may move is unjudgeable (the full check says so of it too), and
    its possible moves have no bound a direction could carry: it is left out of every direction of its
    layer (its sign set to 0), and the oracle's derivatives, and the rounding's spread, are taken along
    those directions instead. That costs one more screen, never a layer's entries one by one."""
    if dtype not in screening.along:
        # The model's bound is its modelled term of sigma: passed as sigma and the term's scale
        # (``terms.modelled(1.0)``; no (L, d, d) bound made).
        *_, effects = judge.kink_effects(dtype, judge.model(dtype).grad_sigma, terms.modelled(1.0))
        unjudgeable = effects.count > 1
        sc, model = screening.estimate, judge.model(dtype)
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
        layers, batch, dim = len(judge.weights), len(judge.x), judge.weights.shape[1]
        if not cost.escalates(layers, batch, dim):  # no full check will judge these kinks again
            judge.forget_kinks(dtype)
        if unjudgeable.any():
            progress = judge.progress("oracle (screening judgeable entries)")
            oracle = screening.oracle.screen
            out = call(oracle, judge.weights, judge.x, directions, progress=progress, keep_model=False)
            if out.error:
                why = f"the reference failed to screen the entries {dtype} rounding leaves judgeable"
                screening.along[dtype] = f"{why}: {out.error}"
                return screening.along[dtype]
            value, error = out.value.value, out.value.error
            screening.more_evaluations += out.value.evaluations
            fwd, deltas = judge.fwd, judge.deltas
            masked = rounding.rounding_model(fwd, deltas, dtype, directions=directions, entries=False)
            assert masked.direction_sigma is not None  # the model was given the directions
            sigma = masked.direction_sigma
        screening.along[dtype] = Along(directions, value, error, sigma, slack, unjudgeable)
    return screening.along[dtype]
