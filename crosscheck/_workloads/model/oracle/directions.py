"""Screening a model's gradient with a fixed budget: directional derivatives of a float64 loss.

Each parameter tensor gets ``per_parameter`` random directions of its own, ``v`` with entries
``+-s`` (``s`` the tensor's RMS), drawn from a fixed seed: every function and every candidate of a run
is screened along the same directions. The oracle differentiates the one-dimensional function
``t -> loss(theta + t v)`` at 0 with ``stencil.differentiate`` (as entry by entry: a kink on the line
widens the error bar), so each direction costs as much as one entry (6 to 10 evaluations), whatever the
tensor's size. A candidate's gradient ``g`` is
projected on the same directions (``g . v``), and so is its measured rounding.

Directions restricted to one tensor localize a failure to that tensor at no extra cost; failing
tensors small enough are then checked entry by entry, within a budget (``LOCALIZE_ENTRIES``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from crosscheck._workloads.model.oracle.entries import (
    FLOAT32_FRACTION,
    FLOAT32_STEP,
    UNJUDGEABLE_FRACTION,
    Evaluator,
    Guard,
    Tick,
    base_steps,
    direct,
    reasons,
)
from crosscheck._workloads.model.oracle.stencil import differentiate, evaluations
from crosscheck._workloads.model.oracle.sums import pairwise, reader, steps

#: Loss evaluations per direction of a smooth loss (before any refinement): the cost model.
EVALUATIONS_PER_DIRECTION = evaluations()
#: The first step along a direction, as a fraction of each tensor's RMS: a direction moves every entry of
#: its tensors at once, and its loss leaves the tableau's asymptotic regime at a smaller step than one
#: entry's (``entries.INITIAL_STEP``, ``2**-4``). From ``2**-4`` whole GPT-2 small's directions needed
#: four halvings past the first four steps, from ``2**-8`` one at most; ``benchmarks/oracle_accuracy.py``
#: (``docs/measurements/model-oracle.md``) keeps every bar honest from either.
DIRECTION_STEP = 2.0**-8
#: Tensors whose directions fail are checked entry by entry, the smallest first, up to this many entries
#: in all per function differenced (about as many evaluations as 256 directions).
LOCALIZE_ENTRIES = 256
#: The directions' seed: the same case is screened along the same directions.
SEED = 0


@dataclasses.dataclass(frozen=True)
class Direction:
    """One direction: ``signs * step`` in parameter ``parameter``, zero elsewhere (``step`` a number, or
    one per entry: a group of tensors taken as one vector, each entry its tensor's RMS)."""

    parameter: str
    signs: np.ndarray  # int8, the parameter's shape
    step: Any  # float, an array of the parameter's shape, or a group's ``sums.Steps`` (one a tensor)

    def vector(self) -> np.ndarray:
        return self.signs.astype(np.float64) * np.asarray(self.step)


def make_directions(params: dict[str, np.ndarray], per_parameter: int) -> list[Direction]:
    """``per_parameter`` random +-1 directions per tensor, scaled by the tensor's RMS (fixed seed)."""
    rng = np.random.default_rng(SEED)
    steps = base_steps({k: np.asarray(v, np.float64) for k, v in params.items()})
    out = []
    for name, value in params.items():
        for _ in range(per_parameter):
            signs = rng.integers(0, 2, size=np.shape(value), dtype=np.int8) * 2 - 1
            out.append(Direction(name, signs.astype(np.int8), steps[name]))
    return out


@dataclasses.dataclass(frozen=True)
class DirectionalEstimate:
    """The oracle's directional derivatives, one per direction, with error bars."""

    value: np.ndarray
    error: np.ndarray
    unjudgeable: np.ndarray
    reason: np.ndarray
    evaluations: int
    scale: float  # the model's RMS gradient, estimated from the directional derivatives


def directional(
    loss,
    params: dict[str, np.ndarray],
    directions: Sequence[Direction],
    *,
    guard: Guard = direct,
    progress: Tick | None = None,
    noise: float = 0.0,
    float32: bool = False,
) -> DirectionalEstimate:
    """Differentiate ``t -> loss(params + t v)`` at 0 for every direction ``v`` (``noise`` and
    ``float32`` as ``entries.estimate``'s)."""
    base = {k: np.array(v, dtype=np.float64) for k, v in params.items()}
    evaluator = Evaluator(
        loss,
        base,
        guard=guard,
        progress=progress,
        expected=EVALUATIONS_PER_DIRECTION * len(directions),
        varying=list(dict.fromkeys(d.parameter for d in directions)),
    )
    whole = {id(d.step): np.asarray(d.step) for d in directions}  # a group's ``Steps`` made once

    def evaluate(t: np.ndarray, which: np.ndarray) -> np.ndarray:
        which = np.broadcast_to(which, t.shape)

        def perturb(pos: tuple[int, ...]) -> Callable[[], None]:
            d = directions[int(which[pos])]
            target, start = evaluator.work[d.parameter], base[d.parameter]
            np.multiply(d.signs, t[pos] * whole[id(d.step)], out=target, casting="unsafe")
            target += start
            return lambda: np.copyto(target, start)

        return evaluator.batch(t.shape, perturb)

    loss0 = evaluator.at_base()
    return along(evaluate, loss0, lambda: evaluator.count, directions, noise=noise, float32=float32)


def along(
    evaluate: Callable[[np.ndarray, np.ndarray], np.ndarray],
    loss0: float,
    counted: Callable[[], int],
    directions: Sequence[Direction],
    *,
    noise: float,
    float32: bool,
) -> DirectionalEstimate:
    """The directional derivatives from ``evaluate(t, which)`` (the loss at ``t`` along direction
    ``which``), ``loss0`` the loss at the point, ``counted()`` the evaluations made: ``directional``'s
    stencil and error bars, whichever side forms the points (``oracle.line``)."""
    count = len(directions)
    norms = every_norm(directions)

    def magnitude(value: np.ndarray) -> np.ndarray:
        return np.abs(np.nan_to_num(value)) + _scale(value, norms) * norms

    value, error, kink = differentiate(
        evaluate,
        np.zeros(count),
        FLOAT32_STEP if float32 else DIRECTION_STEP,
        np.arange(count),
        loss0,
        noise,
        float32,
        magnitude,
    )
    finite = np.isfinite(value)
    scale = _scale(value, norms)
    fraction = FLOAT32_FRACTION if float32 else UNJUDGEABLE_FRACTION
    loose = ~finite | ~(error <= fraction * (np.abs(np.nan_to_num(value)) + scale * norms))
    return DirectionalEstimate(
        np.where(finite, value, 0.0),
        np.where(finite, error, np.inf),
        loose,
        reasons(finite, loose, kink),
        counted(),
        scale,
    )


def _scale(value: np.ndarray, norms: np.ndarray) -> float:
    """The model's RMS gradient from directional derivatives: E[(g . v)^2] = |g o v|^2 for random signs."""
    finite = np.isfinite(value)
    total = float(np.sum(norms[finite] ** 2))
    return math.sqrt(float(np.sum(value[finite] ** 2)) / total) if total > 0 else 0.0


def norm(d: Direction) -> float:
    """``|v|_2`` of a direction (a step array summed a block at a time: ``sums.pairwise``)."""
    if np.ndim(d.step) == 0:
        return float(d.step) * math.sqrt(d.signs.size)
    block = reader(d.step, tuple(d.signs.shape))  # a group's ``Steps`` a block at a time too
    squares = pairwise(d.signs.size, lambda a, b: np.array([np.sum(np.square(block(a, b)))]))
    return math.sqrt(float(squares[0]))


def every_norm(directions: Sequence[Direction]) -> np.ndarray:
    """``norm`` of every direction, once per step array (a group's directions share theirs)."""
    done: dict[int, float] = {}
    out = []
    for d in directions:
        if np.ndim(d.step) == 0:
            out.append(norm(d))
            continue
        if id(d.step) not in done:
            done[id(d.step)] = norm(d)
        out.append(done[id(d.step)])
    return np.array(out)


def _lines(directions: Sequence[Direction]) -> dict[tuple[str, tuple[int, ...]], list[int]]:
    """The directions' indices by the tensor (and shape) they move."""
    out: dict[tuple[str, tuple[int, ...]], list[int]] = {}
    for i, d in enumerate(directions):
        out.setdefault((d.parameter, tuple(d.signs.shape)), []).append(i)
    return out


def _blockwise(x: Any, d: Direction) -> bool:
    """Whether ``x`` is read a block at a time along ``d`` (``sums.reader``): of the signs' shape (or a
    single number), the step a number or of that shape too; else the whole formula, as it was."""
    shape = tuple(d.signs.shape)
    fits = (hasattr(x, "block") and x.size == d.signs.size) or tuple(np.shape(x)) == shape
    if isinstance(x, np.ndarray) and x.size == 1:
        fits = True
    return fits and (np.ndim(d.step) == 0 or tuple(np.shape(d.step)) == shape)


def project(gradient: Mapping[str, Any], directions: Sequence[Direction]) -> np.ndarray:
    """``g . v`` for every direction, in float64: ``np.sum(g * signs * step)`` with ``g`` in float64, to
    the bit, made a block at a time for every direction of a tensor at once (``sums.pairwise``; issue
    38: the product of the model's size per direction, and a group's vector, never made)."""
    out = np.zeros(len(directions))
    for (k, shape), index in _lines(directions).items():
        x, chosen = gradient[k], [directions[i] for i in index]
        if not all(_blockwise(x, d) for d in chosen):
            whole = np.asarray(x, np.float64)
            out[index] = [float(np.sum(whole * d.signs * np.asarray(d.step))) for d in chosen]
            continue
        read = reader(x, shape)
        signs = [d.signs.reshape(-1) for d in chosen]
        step = [steps(d.step) for d in chosen]

        def each(a: int, b: int, read=read, signs=signs, step=step) -> np.ndarray:
            g = np.asarray(read(a, b), np.float64)
            return np.array([np.sum(g * s[a:b] * t(a, b)) for s, t in zip(signs, step, strict=True)])

        out[index] = pairwise(math.prod(shape), each)
    return out


def project_quadrature(term: Mapping[str, Any], directions: Sequence[Direction]) -> np.ndarray:
    """``|t o v|_2`` for every direction: a per-entry bound ``t`` projected (random signs).

    The signs do not enter (``|t * sign * step| = |t * step|``, and only their shape is read): directions
    of one tensor with the same step array (a group's, ``groups.Group.directions``) share one sum, the
    same number to the bit, computed once (a pass over every entry saved per direction), a
    block at a time (``sums.pairwise``: the numbers of ``np.sum(np.square(t * step))`` on the whole)."""
    done: dict[tuple, float] = {}
    out = []
    for d in directions:
        key = (d.parameter, id(d.step), d.signs.shape)
        if key not in done:
            done[key] = math.sqrt(float(_quadrature(term[d.parameter], d)))
        out.append(done[key])
    return np.array(out)


def _quadrature(x: Any, d: Direction) -> float:
    """``np.sum(np.square(t * step))`` over ``d``'s tensor, ``t`` broadcast to it (as it was: its dtype)."""
    if not _blockwise(x, d):
        return np.sum(np.square(np.broadcast_to(np.asarray(x), d.signs.shape) * np.asarray(d.step)))
    read, step = reader(x, tuple(d.signs.shape)), steps(d.step)
    return pairwise(d.signs.size, lambda a, b: np.array([np.sum(np.square(read(a, b) * step(a, b)))]))[0]
