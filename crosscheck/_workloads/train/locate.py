"""Where a training run first differs, and why: the first step and parameter whose update differs,
whether the gradients there agree (from the same parameters on both sides: then the optimizer is at
fault) or not (then the model is), and which optimizer part, by controlled re-runs (each part turned
off on both sides, both sides trained again through ``AFTER`` steps past that one: the first part whose
re-run agrees is the one that differs).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from crosscheck._compare.record import Comparison
from crosscheck._types import Loaded
from crosscheck._workloads.protocol import Call, Options, Point, Reference
from crosscheck._workloads.train import running, zeros
from crosscheck._workloads.train.runs import Runs, failed

#: A classification re-run trains this many steps past the first that differs: at step 1 Adam's update
#: is the gradient's sign, so a bug that only rescales the gradient (clipping per tensor) shows there
#: only through epsilon, and turning epsilon off would seem to remove it; a step or two later it shows
#: through the moments too.
AFTER = 2
#: How a gradient row at the start point is named: ``"fc1.weight (gradient at step 0)"``.
AT_START = "(gradient at step 0)"


def first_difference(found: list[Comparison]) -> tuple[int, str] | None:
    """The first step at which a parameter differs, and the first such parameter (in the model's
    order); None when no step differs (or none was compared)."""
    first: tuple[int, str] | None = None
    for c in found:
        step = next((row["step"] for row in c.per_layer if row["mismatched"]), None)
        if step is not None and (first is None or step < first[0]):
            first = (int(step), str(c.parameter))
    return first


def verdict(
    judge: Any, backend: Loaded, found: list[Comparison], reference: Reference, call: Call, starts: list
) -> tuple[str, dict]:
    """The candidate's verdict in words, and the JSON record of it (``notes["update"]``); ``starts``:
    the comparisons of the optimizer state at the start."""
    steps = judge.workload.steps
    record: dict[str, Any] = {"steps": steps, "first_step": None, "first_parameter": None, "state": None}
    invalid = next((c for c in found if c.status == "invalid"), None)
    if invalid is not None:
        return f"the update of `{invalid.parameter}` was not compared: {invalid.message}", record
    first = first_difference(found)
    differs = next((c for c in starts if not c.passed), None)
    if differs is not None:  # the optimizers started apart: what follows is no evidence of their rules
        return _state_text(differs, first, record), record
    if first is None:
        return running.agree(steps, reference.data.main), record
    step, parameter = first
    record.update(first_step=step, first_parameter=parameter)
    if running.is_statistic(parameter):  # the step's forward, not the optimizer
        return running.differs(step, parameter, record), record
    text = f"the update differs first at step {step}, in `{parameter}`"
    sides = (judge.reference_backend, backend)
    runs = {str(getattr(judge.reference_backend, "name", "torch")): reference.data.main}
    runs[str(getattr(backend, "name", "jax"))] = judge.ran[id(backend)].main
    none = frozenset().union(*(judge.none.get(id(b), frozenset()) for b in sides))
    skipped = zeros.skipped(parameter, none, runs)
    if skipped:
        record["skipped"] = parameter
        return f"{text}: {skipped}", record
    start = {k: v[step - 1].copy() for k, v in running.parameters_only(reference.data.main).items()}
    agree, why = gradients_agree(judge.workload, start, judge.point, call)
    record["gradients"] = {True: "agree", False: "differ", None: "unknown"}[agree]
    if agree is None:
        return f"{text}; the gradient check at step {step} did not happen: {why}", record
    same = f"the gradients at step {step} (both sides at PyTorch's parameters after step {step - 1})"
    if not agree:
        record["gradient_differs_first"] = why
        return (
            f"{text}; {same} already differ, first in `{why}`: the model is at fault, not the optimizer "
            "(`--quantity grad` on the port says where)"
        ), record
    through = min(step + AFTER, steps)
    part, tried = classify(judge, backend, through, reference, call)
    record.update(part=part, controls=tried)
    return f"{text}; {same} agree: the optimizer is at fault; {_part_text(part, tried, through)}", record


def gradients_agree(workload: Any, params: dict, point: Point, call: Call) -> tuple[bool | None, str]:
    """Whether the port's JAX gradient agrees with PyTorch's at ``params`` (the generic judge, PyTorch
    as reference, each side's rounding measured): ``(agree, first differing parameter)``, or
    ``(None, why)`` when the check could not run."""
    found, why, _ = gradients(workload, params, point, call)
    if found is None:
        return None, why
    bad = next((c for c in found if not c.passed), None)
    return (True, "") if bad is None else (False, str(bad.parameter))


def start(judge: Any, name: str, reference_name: str, call: Call) -> tuple[list[Comparison], dict, str]:
    """The port's gradients at the start point, before any step (``gradients``): the rows named
    ``"<parameter> (gradient at step 0)"``, the record's keys (``start_gradients``: agree, differ or
    unknown; ``start_gradient_differs_first``) and what the verdict says of them. A gradient bug is
    seen here at once, whatever the optimizer makes of it in the steps checked; a check that could not
    run is a failing row. The check is the judge's, made once before either side trains
    (``UpdateJudge.start_check``): it names the parameters trained on an exact zero gradient."""
    found, why, _ = judge.start_check(call)
    if found is None:
        text = f"the gradient check at the start (step 0) did not happen: {why}"
        row = failed(name, reference_name, text, parameter="(gradient at step 0)")
        return [row], {"start_gradients": "unknown"}, text
    rows = [
        dataclasses.replace(c, backend=name, reference=reference_name, parameter=f"{c.parameter} {AT_START}")
        for c in found
    ]
    bad = next((c for c in found if not c.passed), None)
    if bad is None:
        return rows, {"start_gradients": "agree"}, "the port's gradients agree at the start (step 0)"
    text = (
        f"the port's gradients at the start (step 0, before any step) differ, first in `{bad.parameter}`: "
        "the model is at fault, not the optimizer (`--quantity grad` on the port says where)"
    )
    return rows, {"start_gradients": "differ", "start_gradient_differs_first": str(bad.parameter)}, text


def gradients(
    workload: Any, params: dict, point: Point, call: Call
) -> tuple[list[Comparison] | None, str, tuple[str, ...]]:
    """The port's JAX gradient against PyTorch's at ``params``, one comparison per parameter (the
    generic judge, PyTorch as reference, each side's rounding measured), and the parameters whose
    gradient it found zero within rounding on both sides (``zeros.zero_gradients``); or ``(None, why,
    ())`` when the check could not run."""
    from crosscheck._workloads.model.judge import GenericJudge

    inner = workload.port.inner
    at = Point(params, dict(point.inputs), {}, point.dtype)
    judge = GenericJudge(workload.port.prepared.workload, at, Options())
    torch, jax = inner.resolve("torch"), inner.resolve("jax")
    ref = judge.reference(torch, call)
    if ref.error is not None:
        return None, f"PyTorch's gradient: {ref.error}", ()
    got = judge.evaluate(jax, call)
    if got.error is not None:
        return None, f"JAX's gradient: {got.error}", ()
    found = judge.compare(jax, got.value, "jax", dataclasses.replace(ref.value, name="torch"), call)
    return found, "", zeros.zero_gradients(judge, "jax", found)


def classify(
    judge: Any, backend: Loaded, step: int, reference: Reference, call: Call
) -> tuple[str | None, dict]:
    """Each optimizer part turned off on both sides (``Train.controls``), trained through ``step``:
    ``(the first part whose re-run agrees, {part: {"values": ..., "agrees": ...}})``."""
    workload, tried, part = judge.workload, {}, None
    sides = (backend, judge.reference_backend)
    before = (judge.ran.get(id(backend)), reference.data)
    for name, values in workload.train.controls().items():
        hyper = {**workload.train.hyper, **values}
        runs = []
        for side in sides:
            main = judge.train(side, call, "float32", steps=step, hyper=hyper)
            wide = judge.train(side, call, "float64", steps=step, hyper=hyper)
            runs.append(None if main.error or wide.error else Runs(main.value, wide.value))
        agrees = None
        if runs[0] is not None and runs[1] is not None:
            found = judge.judged(runs[0], runs[1], "candidate", reference.name)
            agrees = all(c.passed for c in found)
        tried[name] = {
            "values": {k: _plain(v) for k, v in values.items()},
            "agrees": agrees,
            "unchanged": _unchanged(sides, runs, before, step),
        }
        part = name if part is None and agrees else part
    return part, tried


def _unchanged(sides: tuple, runs: list, before: tuple, step: int) -> list[str]:
    """The side whose float64 re-run with a part off is its float64 run with the part on, to float64's
    rounding (``SAME``), while the other side's moved by more than ``MOVED``: that side ignores the
    setting (a factory that does not pass it on, so that the library's own default applies). The float64
    runs, not the float32 ones: a part whose effect is at float32's rounding (epsilon) would look
    unchanged on one side by chance. Both unchanged: the part does not act by then (clipping that never
    clips), which says nothing; ``[]`` then, and where a run is missing."""
    if any(r is None for r in (*runs, *before)):
        return []
    moved = [_moved(run.wide, original.wide, step) for run, original in zip(runs, before, strict=True)]
    still = [m <= SAME for m in moved]
    if still.count(True) != 1 or max(moved) <= MOVED:
        return []
    return [str(getattr(sides[still.index(True)], "name", "?"))]


#: A float64 re-run within this much (relative to the trajectory's largest entry) of the original is
#: unchanged: float64's rounding of a few steps, an eager re-run of a compiled gradient included.
SAME = 1e-12
#: A float64 re-run moved by more than this did change.
MOVED = 1e-9


def _moved(rerun: dict, original: dict, step: int) -> float:
    """How far a float64 re-run went from the original through ``step``, relative to its largest entry."""
    out = 0.0
    for k, value in rerun.items():
        was = np.asarray(original[k][: step + 1], np.float64)
        scale = max(float(np.max(np.abs(was), initial=0.0)), np.finfo(np.float64).tiny)
        out = max(out, float(np.max(np.abs(np.asarray(value, np.float64) - was), initial=0.0)) / scale)
    return out


def _state_text(differs: Comparison, first: tuple[int, str] | None, record: dict) -> str:
    name, _, kind = str(differs.parameter)[:-1].rpartition(" (")
    record["state"] = {"parameter": name, "kind": kind}
    if first is not None:
        record.update(first_step=first[0], first_parameter=first[1])
    then = f"; the parameters differ first at step {first[0]}, in `{first[1]}`" if first else ""
    return (
        f"the optimizer state differs at `{name}` ({kind}) at the start, before step 1: the two optimizers "
        f"were given different states (a resumed state converted wrongly, or a fresh one initialised "
        f"differently){then}"
    )


def _plain(value: object) -> object:
    return list(value) if isinstance(value, tuple) else value


def _part_text(part: str | None, tried: dict, step: int) -> str:
    if not tried:
        return "no optimizer part could be turned off (give `Train(hyper=...)` the parts' hyper-parameters)"
    return _found_text(part, tried, step) + "".join(_ignored(name, t) for name, t in tried.items())


def _ignored(part: str, tried: dict) -> str:
    """What a re-run that changed only one side says: that side ignores the part's setting."""
    if not tried.get("unchanged"):
        return ""
    side = tried["unchanged"][0]
    values = ", ".join(f"{k}={v}" for k, v in tried["values"].items())
    keys = ", ".join(f"`{k}`" for k in tried["values"])
    return (
        f"; turning the {part} off ({values}) changed nothing on `{side}`'s side and changed the other's: "
        f"`{side}`'s optimizer ignores {keys} (does its factory pass {keys} on? otherwise the optimizer's "
        "own default applies)"
    )


def _found_text(part: str | None, tried: dict, step: int) -> str:
    if part is None:
        names = ", ".join(tried)
        return (
            f"no single part turned off removes the difference (tried: {names}): the update rule itself "
            "differs"
        )
    values = ", ".join(f"{k}={v}" for k, v in tried[part]["values"].items())
    also = [n for n, t in tried.items() if t["agrees"] and n != part]
    more = f" (also removed by turning off: {', '.join(also)})" if also else ""
    agree = f"with the {part} off ({values}) both sides agree through step {step}"
    return f"{agree}: the part that differs is the {part}{more}"
