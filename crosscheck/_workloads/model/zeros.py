"""A gradient that is zero in every implementation, confirmed (or refuted) when a backend is the reference.

Some gradients are zero by construction: softmax is shift-invariant, so an attention key projection's
bias moves no output, and both frameworks return zeros (exactly, or at rounding level). Two backends
agreeing on zero say nothing about the derivative: with ``--reference torch`` no oracle ran. So the
judge runs the oracle on those tensors alone: ``PER_TENSOR`` directional differences of each side's own
float64 loss (the reference backend's and the candidate's), along random directions supported on the
zero tensors only (``oracle.directions``), compared with the side's own gradient projected on them, within
the oracle's error bar and the side's measured rounding (``compare.directions``). The directions span
every zero tensor of a side at once (so the cost does not grow with the model); where they refute the
zero, each tensor is checked along directions of its own, which names it.

A tensor is *confirmed* when every side judged at least one direction and none disagrees; *refuted*
when a direction disagrees (the loss does depend on it: the derivatives agree, and are both wrong);
*not judged* otherwise (a side has no own loss, or every direction's error bar was too wide to tell
zero from a real derivative), which fails the run as before: a check that did not happen never passes.
A direction's error bar must be under ``UNJUDGEABLE_FRACTION`` of what the model's RMS gradient would
give along it (``FLOAT32_FRACTION`` for a loss whose float64 evaluation keeps float32 steps, as the
oracle's own threshold: ``oracle.precision``): a zero derivative has no scale of its own to be judged
against.
"""

from __future__ import annotations

import dataclasses
import fnmatch
from collections.abc import Mapping
from typing import Any

import numpy as np

from crosscheck._compare.dtypes import as_dtype
from crosscheck._types import Loaded
from crosscheck._workloads.model import compare as model_compare
from crosscheck._workloads.model.findings import Judging, ZeroCheck
from crosscheck._workloads.model.oracle.directions import directional, every_norm, make_directions
from crosscheck._workloads.model.oracle.entries import FLOAT32_FRACTION, UNJUDGEABLE_FRACTION, OracleFailed
from crosscheck._workloads.model.oracle.function import Skip, batch_guard, release
from crosscheck._workloads.model.oracle.one_thread import one_thread
from crosscheck._workloads.model.oracle.sources import own_loss
from crosscheck._workloads.model.rounding import Rounding

#: Directions per zero tensor and side (each ~8 loss evaluations).
PER_TENSOR = 2
#: The name of every zero tensor of a side taken as one vector (checked at once, then one by one).
JOINT = "(every zero tensor)"
CONFIRMED = "zero by construction: confirmed by differences of each side's own float64 loss"
#: How ``oracle.sources.own_loss`` says a side's loss cannot be evaluated in float64 at all.
NO_FLOAT64 = "failed in float64"


@dataclasses.dataclass(frozen=True)
class Side:
    """An implementation whose own loss is differenced: its name, backend, gradient and rounding."""

    name: str
    backend: Loaded
    gradient: dict[str, np.ndarray]
    rounding: Rounding


def zero_tensors(shapes: dict, gradients: list[dict], zeros: dict[str, bool]) -> list[str]:
    """The tensors whose gradient is exactly zero in every one of ``gradients``, or within rounding
    (a gradient of zeros passed the comparison: ``zeros``, ``"question/name" -> passes``)."""
    out = []
    for k, shape in shapes.items():
        present = [np.asarray(g[k]) for g in gradients if k in g and np.shape(g[k]) == shape]
        if len(present) != len(gradients):
            continue
        exact = all(not np.any(g) for g in present)
        keys = [v for key, v in zeros.items() if key.endswith(f"/{k}")]
        if exact or (keys and all(keys)):
            out.append(k)
    return out


def confirm(judge: Judging, sides: list[Side], names: list[str], call: Any) -> None:
    """Each side's zero check of ``names`` (those not yet checked), into ``judge.findings.zero_checks``."""
    checks = judge.findings.zero_checks
    for side in sides:
        todo = [k for k in names if side.name not in checks.get(k, {})]
        if todo:
            for check in _side(judge, side, todo, call):
                checks.setdefault(check.parameter, {})[check.side] = check


def _side(judge: Judging, side: Side, names: list[str], call: Any) -> list[ZeroCheck]:
    """One side: first along directions supported on every zero tensor at once (a fixed cost, however
    many); where that refutes the zero, along directions of each tensor alone, to name it."""
    function = own_loss(side.backend, side.name, judge.point, call)
    if isinstance(function, Skip):
        return [ZeroCheck(side.name, k, "not judged", why=function.reason) for k in names]
    params = as_dtype(judge.point.params, "float64")
    scale = _rms(side.gradient)
    try:
        if len(names) > 1:
            joint = _joint(judge, side, function, params, names, scale, call)
            if joint.status != "refuted":
                return [dataclasses.replace(joint, parameter=k) for k in names]
        found = _along(judge, side, function, params, {k: judge.shapes[k] for k in names}, scale, call)
        return [found[k] for k in names]
    finally:  # what the side's adapter holds of these evaluations, dropped (as the oracle's differences)
        release(function.release)


def _joint(judge, side: Side, function: Any, params: dict, names: list[str], scale: float, call) -> ZeroCheck:
    """The zero tensors as one vector (``JOINT``): ``function`` of it, the gradient and rounding of it."""
    sizes = [int(np.prod(judge.shapes[k])) for k in names]
    ends = np.cumsum(sizes)

    def fn(p: dict[str, np.ndarray]) -> object:
        parts = np.split(p[JOINT], ends[:-1])
        return function.fn({**params, **{k: parts[i].reshape(judge.shapes[k]) for i, k in enumerate(names)}})

    def flat(arrays: Mapping[str, Any]) -> np.ndarray:
        return np.concatenate(
            [np.broadcast_to(np.asarray(arrays[k], np.float64), judge.shapes[k]).ravel() for k in names]
        )

    rounding = side.rounding
    joined = dataclasses.replace(
        rounding,
        term={JOINT: flat(rounding.term)},
        delta=None if rounding.delta is None else {JOINT: flat(rounding.delta)},
    )
    whole = dataclasses.replace(function, fn=fn)
    joined_side = dataclasses.replace(side, gradient={JOINT: flat(side.gradient)}, rounding=joined)
    found = _along(judge, joined_side, whole, {JOINT: flat(params)}, {JOINT: (int(ends[-1]),)}, scale, call)
    return found[JOINT]


def _along(judge, side: Side, function: Any, params: dict, shapes: dict, scale: float, call) -> dict:
    """``PER_TENSOR`` directions of each of ``shapes``, differenced on ``function``: a check of each."""
    dirs = make_directions({k: params[k] for k in shapes}, PER_TENSOR)
    label = f"oracle: zero gradients, {function.label}"
    tick = None if judge.options.progress is None else (lambda d, t: judge.progress(label, d, t))
    float32 = function.precision is not None and function.precision.float32  # float32 steps inside
    try:
        with one_thread(sum(int(np.size(v)) for v in params.values())):
            est = directional(
                function.fn,
                params,
                dirs,
                guard=batch_guard(call),
                progress=tick,
                noise=function.rounding,
                float32=float32,
            )
    except OracleFailed as exc:  # a guarded evaluation failed
        return {k: ZeroCheck(side.name, k, "not judged", why=f"its loss failed: {exc}") for k in shapes}
    fraction = FLOAT32_FRACTION if float32 else UNJUDGEABLE_FRACTION
    loose = ~(est.error <= fraction * scale * every_norm(dirs))
    est = dataclasses.replace(est, unjudgeable=~np.isfinite(est.error) | loose)
    ctx = model_compare.Context(
        side.name, "oracle", "derivative", function.label, judge.dtype, judge.options, shapes
    )
    rows, _ = model_compare.directions(ctx, side.gradient, side.rounding, est, dirs)
    return {k: _verdict(side.name, k, rows[k], est) for k in shapes}


def _verdict(side: str, k: str, row: dict, est: Any) -> ZeroCheck:
    judged = row["judged"]
    count = int(np.count_nonzero(judged))
    index = row["index"]
    if count == 0:
        why = "every direction's error bar is too wide to tell zero from a derivative"
        return ZeroCheck(side, k, "not judged", len(index), why=why)
    worst = int(np.argmax(np.where(judged, np.abs(est.value[index]), -1.0)))
    status = "refuted" if bool(np.any(row["failing"])) else "confirmed"
    value, error = float(est.value[index][worst]), float(est.error[index][worst])
    return ZeroCheck(side, k, status, count, value, error)


def _rms(gradient: dict[str, np.ndarray]) -> float:
    total = sum(float(np.sum(np.square(np.asarray(g, np.float64)))) for g in gradient.values())
    size = sum(int(np.size(g)) for g in gradient.values())
    return (total / size) ** 0.5 if size else 0.0


def judged(checks: dict[str, dict[str, ZeroCheck]], names: list[str], sides: list[str]) -> dict[str, list]:
    """``names`` by outcome: ``confirmed`` (every side), ``refuted`` and ``not judged`` (their checks)."""
    out: dict[str, list] = {"confirmed": [], "refuted": [], "not judged": [], "one side": []}
    for k in names:
        found = checks.get(k, {})
        never = "its own loss was not differenced"
        mine = [found.get(s) or ZeroCheck(s, k, "not judged", why=never) for s in sides]
        refuted = [c for c in mine if c.status == "refuted"]
        unjudged = [c for c in mine if c.status == "not judged"]
        confirmed = [c for c in mine if c.status == "confirmed"]
        if refuted:
            out["refuted"] += refuted
        elif unjudged and confirmed and all(NO_FLOAT64 in c.why for c in unjudged):
            # A side that cannot run in float64 at all (a mask of float32's minimum overflows): the
            # zero is confirmed on the other sides' own losses, and said so (``"one side"``).
            out["confirmed"].append(k)
            out["one side"] += unjudged
        elif unjudged:
            out["not judged"] += unjudged
        else:
            out["confirmed"].append(k)
    return out


def problems(outcome: dict[str, list]) -> list[str]:
    """What fails the run: a refuted zero, a zero not judged."""
    out = [
        f"the gradient of `{c.parameter}` is zero in every implementation, but differences of `{c.side}`'s "
        f"own float64 loss along {c.directions} direction(s) supported on it are not "
        f"({c.derivative:.3g} +- {c.error:.3g}): the loss depends on `{c.parameter}`, its gradient is wrong"
        for c in outcome["refuted"]
    ]
    out += [
        f"the gradient of `{c.parameter}` is zero in every implementation and the oracle could not confirm "
        f"it on `{c.side}`'s own float64 loss ({c.why}): nothing checked it; run with the oracle as reference"
        for c in outcome["not judged"]
    ]
    return out


def reach(
    unreached: list[str] | None, unused: tuple[str, ...], named: list[str], confirmed: list[str]
) -> dict[str, list[str]]:
    """Of the zero gradients the oracle confirmed, those the loss does not reach (``unreached``: no
    autograd path from them to the loss; None when not known, as for a ``Workload``): ``declared``
    out of scope by an ``unused`` pattern, or ``unreached`` (not checked: the run fails)."""
    cut = [k for k in named if unreached is not None and k in unreached and k in confirmed]
    declared = [k for k in cut if any(fnmatch.fnmatchcase(k, p) for p in unused)]
    return {"unreached": [k for k in cut if k not in declared], "declared unused": declared}


def unreached_problem(names: list[str]) -> str:
    """The one line that names the parameters the loss does not reach, with how to fix it."""
    patterns = ", ".join(f'"{p}.*"' for p in dict.fromkeys(k.split(".", 1)[0] for k in names))
    shown = ", ".join(f"`{k}`" for k in names)
    return (
        f"the loss does not reach {shown} (no autograd path from them to it; their gradient is zero in "
        "every implementation, confirmed by the oracle): nothing checked them; include them in the loss "
        f"(`output=`, `loss=`) or declare them out of scope: crosscheck.Port(..., unused=({patterns},))"
    )
