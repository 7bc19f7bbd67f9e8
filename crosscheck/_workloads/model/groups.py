"""A candidate screened by groups of tensors: every tensor at once, halved where a direction disagrees.

The oracle differences the loss along random directions that touch every tensor of a group
(``oracle.groups``); the candidate's gradient, its measured rounding and every term of its tolerance are
projected on the same directions (``compare.directions``, the group taken as one vector, each tensor
keeping its own floor). A group whose directions all agree (at least one judged) judges each of its
tensors: "judged in a group of N". A group with a direction that disagrees, or none judged, is halved
and each half screened, down to single tensors, which are judged along their own directions and
localized entry by entry as before (``summary``). A healthy model costs one group's directions, however
many tensors it has; each tensor that disagrees costs about ``2 log2(tensors)`` groups more.

Cancellation: an error ``e`` (the candidate's gradient minus the truth, over the group) moves a
direction's derivative by ``e . v``, a sum of ``+-s_i e_i`` over the group's entries with independent
random signs. It is zero for every one of ``K`` directions only by chance: when the error is spread over
many entries ``e . v`` is close to Gaussian with standard deviation ``|s o e|_2``, and falls below a
fraction ``x`` of it with probability about ``0.8 x`` per direction, ``(0.8 x)^K`` for all ``K``; when it
is confined to two entries of equal size it cancels exactly with probability ``1/2`` per direction,
``2^-K`` for all. The same holds for a tensor's own directions; what a group changes is the tolerance
the error is measured against, which sums (in quadrature) the rounding of every entry of the group.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from crosscheck._compare import screening
from crosscheck._compare.record import Comparison
from crosscheck._types import Floats
from crosscheck._workloads.model import compare as model_compare
from crosscheck._workloads.model.findings import Judging
from crosscheck._workloads.model.oracle.directions import LOCALIZE_ENTRIES, DirectionalEstimate
from crosscheck._workloads.model.oracle.function import Differences, screen_group
from crosscheck._workloads.model.oracle.groups import JOINT, Group
from crosscheck._workloads.model.oracle.sums import Steps, pairwise
from crosscheck._workloads.model.rounding import Rounding


@dataclasses.dataclass(frozen=True)
class Screen:
    """How one tensor was judged: its ``group`` (itself alone, or with others), the group's ``row``
    and the oracle's ``est`` along its directions, whether zeros would pass, or why nothing was."""

    group: Group
    row: dict | None
    est: DirectionalEstimate | None
    zero: bool
    problem: str = ""

    @property
    def alone(self) -> bool:
        return len(self.group.names) == 1


def bisect(
    judge: Judging,
    ctx: model_compare.Context,
    names: list[str],
    value: dict[str, np.ndarray],
    rounding: Rounding,
    diffs: Differences,
    call: Any,
) -> dict[str, Screen]:
    """Each of ``names`` screened: in the group of all of them, or in the halves of a failing group."""
    out: dict[str, Screen] = {}
    queue = [Group.of(names, ctx.shapes)] if names else []
    while queue:
        group = queue.pop(0)
        found = screen_group(
            diffs, group, judge.point, judge.differencing.per_parameter, call, judge.progress
        )
        if isinstance(found, str):
            out.update({k: Screen(group, None, None, False, found) for k in group.names})
            continue
        dirs, est = found
        row = _compare(ctx, group, value, rounding, est, dirs)
        if len(group.names) == 1 or screening.Directions.of(row).agrees:
            zeros = _zeros(group, value, row, dirs)
            out.update({k: Screen(group, row, est, zeros[k]) for k in group.names})
        else:
            queue += [half for half in group.halves() if half.names]
    return out


def _compare(ctx, group: Group, value, rounding: Rounding, est, dirs) -> dict:
    """The candidate along the group's directions, the group as one vector (each tensor its floor):
    ``Group.flat``'s vectors, read a block at a time (``Group.joint``; four float64 copies of
    the model per comparison, never made now)."""
    sub = dataclasses.replace(ctx, shapes={JOINT: (sum(group.sizes),)})
    term: dict[str, Any] = {JOINT: group.joint(rounding.term)}  # each a ``Joint``, read as the vector
    delta: dict[str, Any] | None = None if rounding.delta is None else {JOINT: group.joint(rounding.delta)}
    joined = dataclasses.replace(rounding, term=term, delta=delta)
    floor = {k: np.asarray(model_compare.floor_of(value[k], ctx.dtype)) for k in group.names}
    floors: dict[str, Any] = {JOINT: group.joint(floor)}
    vector: dict[str, Any] = {JOINT: group.joint(value)}
    rows, _ = model_compare.directions(sub, vector, joined, est, dirs, floors)
    return rows[JOINT]


def _zeros(group: Group, value: dict, row: dict, dirs: list) -> dict[str, bool]:
    """Per tensor of the group: whether a gradient of zeros there would pass too (its own part of the
    candidate's projection within the group's bound along every judged direction); each part
    ``np.sum(value * (signs * step))`` over the tensor, a block at a time for every direction at once
    (``oracle.sums.pairwise``: the same numbers; not every direction's vector of the model's
    size, nor the tensor's float64 copy)."""
    terms = row["terms"]
    bound = terms["rounding"] + terms["reference"] + terms["floor"]
    judged = row["judged"]
    signs = [group.pieces(d.signs) for d in dirs]
    steps = [_pieces(group, d.step) for d in dirs]
    out = {}
    for k, shape in zip(group.names, group.shapes, strict=True):
        parts = [
            (s[k].reshape(-1), d.step if t is None else t[k])
            for d, s, t in zip(dirs, signs, steps, strict=True)
        ]
        own = _own(value[k], shape, parts)
        out[k] = bool(np.all(np.abs(own[judged]) <= bound[judged]))
    return out


def _pieces(group: Group, step: Any) -> dict[str, Any] | None:
    """A direction's step cut into the group's tensors: None for a number, a ``Steps``'s number per
    tensor (not the group's array), else flat views of the array."""
    if not np.ndim(step):
        return None
    if isinstance(step, Steps):
        return dict(zip(group.names, step.values, strict=True))
    return {k: v.reshape(-1) for k, v in group.pieces(np.asarray(step)).items()}


def _own(x: Any, shape: tuple[int, ...], parts: list[tuple[np.ndarray, Any]]) -> np.ndarray:
    """``np.sum(x * (signs * step))`` (``x`` in float64) for each ``(signs, step)`` of ``parts`` (flat,
    the step a number or flat too), to the bit; ``x`` not of ``shape``: the whole formula, as it was."""
    if tuple(np.shape(x)) != tuple(shape):
        v = np.asarray(x, np.float64)
        return np.array([float(np.sum(v * (s.reshape(shape) * _shaped(t, shape)))) for s, t in parts])
    flat = np.asarray(x).reshape(-1)

    def each(a: int, b: int) -> np.ndarray:
        v = np.asarray(flat[a:b], np.float64)
        return np.array([np.sum(v * (s[a:b] * (t if np.ndim(t) == 0 else t[a:b]))) for s, t in parts])

    return pairwise(flat.size, each)


def _shaped(step: Any, shape: tuple[int, ...]) -> Floats:
    return step if np.ndim(step) == 0 else step.reshape(shape)


def coverage(screen: Screen, per: int) -> str:
    """What was done to judge a tensor, in words."""
    directions = f"{per} random direction{'s' if per > 1 else ''}"
    if screen.alone:
        return f"{screening.SCREENED}: {directions}"
    group = len(screen.group.names)
    return f"{screening.SCREENED}: judged in a group of {group} tensors, {directions} touching every one"


def not_screened(ctx: model_compare.Context, k: str, problem: str) -> Comparison:
    """A tensor whose group the oracle could not difference: not checked, and failed."""
    return model_compare.invalid(
        ctx, k, f"parameter `{k}`: not checked: the oracle failed on its group of tensors: {problem}"
    )


def localizable(diffs: Differences, rows: dict, value: dict) -> tuple[list[str], dict[str, str]]:
    """The failing tensors checked entry by entry (the smallest first, ``LOCALIZE_ENTRIES`` entries in
    all per function, those already checked free), and why each other failing tensor is not."""
    spent = sum(int(v[0].size) for v in diffs.localized.values())
    chosen, notes = [], {}
    failing = (k for k, row in rows.items() if screening.Directions.of(row).mismatched)
    for k in sorted(failing, key=lambda k: value[k].size):
        size = int(np.size(value[k]))
        if k in diffs.localized or spent + size <= LOCALIZE_ENTRIES:
            chosen.append(k)
            spent += 0 if k in diffs.localized else size
        elif size > LOCALIZE_ENTRIES:
            notes[k] = f"`{k}` has {size} entries, over {LOCALIZE_ENTRIES}: not {screening.ESCALATED}"
        else:
            notes[k] = f"not {screening.ESCALATED}: the budget of {LOCALIZE_ENTRIES} entries is spent"
    return chosen, notes
