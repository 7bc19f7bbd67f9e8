"""The ``update`` judge: each side's parameters after every optimizer step, compared parameter by
parameter within both sides' measured rounding.

Each side trains twice from the same start: in the case's dtype (float32) and re-run in float64. Its
rounding at step ``t`` is the difference of the two trajectories there, entry by entry: it grows with
the steps as the rounding really does (Adam's update of an entry whose gradient is near zero is a
sign, and float32 may flip it: that entry's tolerance grows, the others' do not). The measured
difference is evidence, not a tolerance to take as it comes: where its typical entry is beyond what
float32 permits of the float64 trajectory (``crosscheck._compare.terms``), it is capped there and
the report says so; an entry beyond it is capped there too unless the other side's float32 run or
the float64 trajectories show as much (``capped_rounding``): a float32-only error on a minority of
entries does not set its own tolerance. An entry passes when the two float32 trajectories differ by at most
``SAFETY x (|its rounding| + RMS)`` of each side, plus a floor of a few unit roundoffs of the
parameter at that step.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from crosscheck._compare import terms as _terms
from crosscheck._compare.compare import compare
from crosscheck._compare.constants import UNIT_ROUNDOFF
from crosscheck._compare.dtypes import as_dtype
from crosscheck._compare.record import Comparison, Tolerance
from crosscheck._report.report import Section, Verdict
from crosscheck._types import Loaded
from crosscheck._workloads.protocol import Call, Options, Outcome, Point, Reference
from crosscheck._workloads.train import locate, running, state, zeros
from crosscheck._workloads.train.runs import HOW, Runs, Trajectories, failed

TERM_HELP = {
    "rounding": _terms.measured_help(
        "the candidate's rounding",
        "|its float32 trajectory - its float64 re-run| at that step",
        "that difference's RMS over the parameter at that step",
    ),
    "reference": _terms.measured_help("the reference's rounding", "|float32 - float64|", "RMS", again=True),
    "floor": _terms.floor_help("the parameter's largest reference entry at that step"),
}

#: The report's section of a train: the optimizer state's pairing, before the table.
STATE = Section(state.render_section, place="before")


class UpdateJudge:
    """The ``update`` of a ``TrainWorkload`` at one point (the reference: PyTorch's optimizer)."""

    signature = "update(params, inputs)"

    def __init__(self, workload: Any, point: Point, options: Options) -> None:
        if point.dtype != "float32":
            raise ValueError(
                "`dtype` of quantity 'update' must be float32 (each side's rounding is measured by a "
                f"float64 re-run of its training), found {point.dtype!r}."
            )
        self.workload, self.point, self.options = workload, point, options
        self.notes: dict[str, dict[str, Any]] = {}
        self.verdicts: dict[str, Verdict] = {}
        self.reference_backend: Any = None
        #: Each side's optimizer state at the start, by ``(id(backend), dtype)`` (``state.split``).
        self.starts: dict[tuple[int, str], dict] = {}
        #: Each candidate's trajectories with the train's own hyper-parameters, by ``id(backend)``: what
        #: a controlled re-run is held against to see whether turning a part off changed its side.
        self.ran: dict[int, Runs] = {}
        #: Each side's parameters whose ``.grad`` was None (PyTorch's: ``zeros.NO_GRADIENT``).
        self.none: dict[int, frozenset[str]] = {}
        #: The gradient check at the start, made once before either side trains (``start_check``).
        self.at_start: tuple[list[Comparison] | None, str, tuple[str, ...]] | None = None

    def start_check(self, call: Call) -> tuple[list[Comparison] | None, str, tuple[str, ...]]:
        """The port's gradients at the start point (``locate.gradients``), made once: the comparisons,
        why they could not be made, and the parameters whose gradient is zero within rounding on both
        sides, which every run trains on an exact zero gradient (``zeros``)."""
        if self.at_start is None:
            self.at_start = locate.gradients(self.workload, dict(self.point.params), self.point, call)
        return self.at_start

    def train(self, backend: Loaded, call: Call, dtype: str, **how: Any) -> Outcome:
        """One guarded training run of ``backend`` from the point, in ``dtype``: its trajectories (its
        start state kept aside when it trains as the run's case says, not a classification re-run)."""
        params, inputs = as_dtype(self.point.params, dtype), as_dtype(self.point.inputs, dtype)
        main = not how
        zero = self.start_check(call)[2]
        how = {"steps": self.workload.steps, "hyper": self.workload.train.hyper, "zero": zero, **how}
        out = call(backend.update, params, inputs, convert="arrays", **how)
        problem = out.error is None and _problem(out.value, self.point.params, how["steps"])
        if problem or out.error is not None:
            return dataclasses.replace(out, value=None, error=problem) if problem else out
        trajectories, start = state.split(out.value, self.point.params)
        self.none[id(backend)] = frozenset(start.pop(zeros.NO_GRADIENT, {}))
        if main:
            self.starts[(id(backend), dtype)] = start
        return dataclasses.replace(out, value=trajectories)

    def evaluate(self, backend: Loaded, call: Call) -> Outcome:
        return self.train(backend, call, self.point.dtype)

    def reference(self, backend: Loaded, call: Call) -> Outcome:
        out = self.evaluate(backend, call)
        if out.error is not None:
            return out
        again = self.train(backend, call, "float64")
        if again.error is not None:
            return dataclasses.replace(out, value=None, error=f"its float64 re-run failed: {again.error}")
        self.reference_backend = backend  # the classification re-runs train it again
        value = {k: np.asarray(v, np.float64) for k, v in out.value.items()}
        notes = {"rounding": "measured: each step re-run in float64", **getattr(backend, "notes", {})}
        return dataclasses.replace(
            out, value=Reference(value, "float32", notes, Runs(out.value, again.value))
        )

    def compare(
        self, backend: Loaded, value: dict[str, np.ndarray], name: str, reference: Reference, call: Call
    ) -> list[Comparison]:
        again = self.train(backend, call, "float64")
        if again.error is not None:
            text = f"the update check did not happen: `{name}`'s float64 re-run failed: {again.error}"
            self.verdicts[name] = Verdict(text, fails=True)
            return [failed(name, reference.name, text)]
        moving = running.parameters_only(reference.data.main)  # a statistic moves whatever the lr
        still = unmoved(moving)
        if len(still) == len(moving):
            text = (
                f"the update check did not happen: no parameter of `{reference.name}` moved in "
                f"{self.workload.steps} steps, so nothing was compared (a learning rate of 0? an optimizer "
                "given no parameters?)"
            )
            self.verdicts[name] = Verdict(text, fails=True)
            return [failed(name, reference.name, text)]
        grads, at_start, said = locate.start(self, name, reference.name, call)
        found, capped, lone = judged(
            Runs(value, again.value), reference.data, name, reference.name, self.options
        )
        rows, starts = state.compared(self, backend, name, reference.name)
        self.point.case["optimizer_state"] = rows
        self.notes[name] = {"rounding": "measured: each step re-run in float64" + _capped(capped, lone)}
        self.notes[name]["step"] = HOW  # which step was checked: the one the user wrote, uncompiled
        if still:  # compared, but said: a frozen parameter's "agreement" is only that both left it alone
            self.notes[name]["unmoved"] = still
        self.ran[id(backend)] = Runs(value, again.value)
        verdict, record = locate.verdict(self, backend, found, reference, call, starts)
        if record["first_step"] is not None:  # the tolerance could not be what was measured
            verdict += _capped_verdict(capped, lone)
        record.update(at_start)  # added keys: the gradients at the start point, before any step
        verdict = f"{said}; {verdict}" if at_start["start_gradients"] != "agree" else f"{verdict}; {said}"
        zero = self.start_check(call)[2]
        if zero:  # trained on an exact zero gradient: said, never taken for the update rule
            record["zero_gradient"] = list(zero)
            verdict += f"; {zeros.said(zero)}"
        self.notes[name]["update"] = record
        found += starts + grads
        self.verdicts[name] = Verdict(verdict, fails=any(not c.passed for c in found))
        return found

    def judged(self, candidate: Runs, reference: Runs, name: str, reference_name: str) -> list[Comparison]:
        """``candidate``'s trajectories against ``reference``'s with this run's options (``judged``), for
        ``locate`` and ``state``, which are handed the judge and never import this module."""
        return judged(candidate, reference, name, reference_name, self.options)[0]

    def extras(self, reference: Reference | None) -> dict[str, Any]:
        self.point.case["steps"] = self.workload.steps
        return {"quantity": "update", "verdicts": dict(self.verdicts), "sections": (STATE,)}


def judged(
    candidate: Runs, reference: Runs, name: str, reference_name: str, options: Options
) -> tuple[list[Comparison], list[str], list[str]]:
    """One comparison per parameter over every step (``split="step"``: a row per step), the
    trajectories whose measured rounding was capped at what float32 permits (their typical entry beyond
    it), and those with entries capped alone (beyond it where neither the other side's float32 run nor
    the float64 trajectories show anything: ``capped_rounding``)."""
    out, capped, lone = [], [], []
    u = UNIT_ROUNDOFF["float32"]
    for k, ref in reference.main.items():
        terms: dict[str, np.ndarray] = {}
        sides = {"rounding": candidate, "reference": reference}
        signed = {t: _signed(side.main.get(k), side.wide.get(k), ref) for t, side in sides.items()}
        apart = np.abs(_wide(candidate.wide.get(k), ref) - _wide(reference.wide.get(k), ref))
        for (term, side), other in zip(sides.items(), ("reference", "rounding"), strict=True):
            seen = np.maximum(_step_max(signed[other]), apart)
            mine, ratio, alone = capped_rounding(signed[term], _wide(side.wide.get(k), ref), seen)
            capped += [f"{term} of `{k}`"] if ratio > 1.0 else []
            lone += [f"{term} of `{k}` ({alone} entr{'ies' if alone > 1 else 'y'})"] if alone else []
            terms[term] = _terms.measured(np.abs(mine), _step_rms(mine))
        wide = np.asarray(ref, np.float64)
        terms["floor"] = _terms.floor(np.max(np.abs(wide), axis=tuple(range(1, wide.ndim)), keepdims=True), u)
        terms["floor"] = np.broadcast_to(terms["floor"], wide.shape)
        if options.slack is not None:
            terms["slack"] = np.broadcast_to(options.slack_at(wide), wide.shape)
        c = compare(
            candidate.main.get(k, np.full(wide.shape, np.nan, np.float32)),
            wide,
            Tolerance(terms),
            backend=name,
            reference_name=reference_name,
            dtype="float32",
            parameter=k,
            term_help=TERM_HELP,
            split="step",
            keep=options.plot,
        )
        total = Tolerance(terms).total()
        out.append(dataclasses.replace(c, arrays={**c.arrays, "rounding": {k: total}}))
    return out, capped, lone


def capped_rounding(
    signed: np.ndarray, wide: np.ndarray, seen: np.ndarray | None = None
) -> tuple[np.ndarray, float, int]:
    """A side's measured trajectory rounding ``signed``, capped entry by entry at what float32 permits
    of its float64 trajectory ``wide``, the median ratio of the two, and how many entries were capped
    alone. A trajectory's entry is the sum of its start and every update added to it, each rounded in
    float32: its scale is its value (``terms.bound``) plus the path it travelled, ``sum_s |wide[s] -
    wide[s - 1]|`` up to each step. An entry beyond it keeps its measured rounding only as far as
    ``seen`` goes: the largest rounding the other side's float32 run measured in the same parameter at
    that step, or how far the two float64 trajectories are apart at that entry (an update made of
    rounding, Adam's sign of a gradient near zero, moves on both sides, or in float64 too); an error of
    one side's float32 run alone, on a minority of entries, is never its own tolerance. Where the
    typical entry is beyond the permit (a training that diverges, a side below float32 precision),
    every entry is capped there."""
    path = np.cumsum(np.abs(np.diff(wide, axis=0, prepend=wide[:1])), axis=0)
    limit = _terms.bound(wide) + _terms.travelled(path)
    ratio = _terms.median_ratio(signed, limit, wide)
    if ratio <= 1.0 and seen is not None:
        limit = np.maximum(limit, seen)
    alone = int(np.count_nonzero(np.abs(signed) > limit)) if ratio <= 1.0 else 0
    return np.clip(signed, -limit, limit), ratio, alone


def _wide(value: Any, like: np.ndarray) -> np.ndarray:
    """A trajectory in float64, NaN-free (a missing one: zeros shaped like ``like``)."""
    if value is None:
        return np.zeros(np.shape(like))
    return np.nan_to_num(np.asarray(value, np.float64))


def _signed(main: Any, wide: Any, like: np.ndarray) -> np.ndarray:
    """A side's float32 trajectory minus its float64 re-run, NaN-free."""
    if main is None or wide is None:
        return np.zeros(np.shape(like))
    return np.nan_to_num(np.asarray(main, np.float64) - np.asarray(wide, np.float64))


def unmoved(trajectories: Trajectories) -> list[str]:
    """The parameters that no step changed (every row equal to the start, bit for bit)."""
    return [k for k, rows in trajectories.items() if all(np.array_equal(r, rows[0]) for r in rows[1:])]


def _step_max(signed: np.ndarray) -> np.ndarray:
    axes = tuple(range(1, signed.ndim))
    return np.max(np.abs(signed), axis=axes, keepdims=True) if axes else np.abs(signed)


def _step_rms(signed: np.ndarray) -> np.ndarray:
    axes = tuple(range(1, signed.ndim))
    return np.sqrt(np.mean(np.square(signed), axis=axes, keepdims=True)) if axes else np.abs(signed)


def _capped_verdict(capped: list[str], lone: list[str]) -> str:
    said = ""
    if capped:
        said += (
            f"; the measured rounding of {len(capped)} trajector{'ies' * (len(capped) > 1) or 'y'} was "
            "capped at what float32 permits (a training that diverges or is chaotic, or a side computing "
            "below float32 precision: see the notes)"
        )
    if lone:
        said += (
            f"; {len(lone)} trajector{'ies' * (len(lone) > 1) or 'y'} had entries whose float32 run left "
            "its float64 re-run by more than float32 permits and than the other side's float32 run or "
            "the float64 trajectories show (an error of that float32 run alone), their rounding capped "
            "there: see the notes"
        )
    return said


def _capped(capped: list[str], lone: list[str]) -> str:
    said = ""
    if capped:
        below = ", ".join(capped)
        said += f"; capped at what float32 permits (a float32 trajectory below float32 precision): {below}"
    if lone:
        said += (
            "; entries capped at what float32 permits, their float32 run off its float64 re-run by more than "
            "the other side's float32 run is anywhere in that parameter at that step, and the float64 "
            f"trajectories at that entry: {', '.join(lone)}"
        )
    return said


def _problem(value: dict[str, np.ndarray], params: dict[str, np.ndarray], steps: int) -> str:
    """Why a side's trajectories cannot be compared ("" when they can)."""
    missing = [k for k in params if k not in value]
    if missing:
        return f"its trajectories lack parameter `{missing[0]}`"
    rows = {value[k].shape[0] for k in params}
    if rows != {steps + 1}:
        return f"its trajectories have {sorted(rows)} rows, expected {steps + 1}"
    bad = next((k for k in params if value[k].shape[1:] != params[k].shape), None)
    return (
        f"its trajectory of `{bad}` has shape {value[bad].shape[1:]}, expected {params[bad].shape}"
        if bad
        else ""
    )
