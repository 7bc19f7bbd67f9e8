"""What a workload's run found, in words: per candidate, which question failed; the coverage; the empty
check; the parameters whose gradient is zero in every implementation (the report's ``oracle`` section).

- **The empty check.** When a gradient of zeros would pass every entry (every direction) of every
  parameter of a candidate, the gradient of the loss is at rounding level everywhere: nothing was
  checked, and the run fails with one line that says how to fix the loss.
- **Zero in every implementation.** A parameter whose gradient is exactly zero (or zero within
  rounding) in every implementation is named. With the oracle as reference it was judged against zero
  (the oracle differences the loss, which sees whether it is really flat); with another backend as
  reference nothing independent looked at it, and the run fails.

The judge owns a ``Findings`` (``findings``: a ``Record`` per candidate, the differences every candidate
is compared with, whether the reference is the oracle) and fills it as it compares; ``summarize`` reads
that alone. ``against_oracle`` compares one candidate for the judge through its public surface
(``findings.Judging``: ``context``, ``differencing``, ``point``, ``progress``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from crosscheck._compare.compare import structural_problem
from crosscheck._compare.constants import STORAGE_ROUNDOFF
from crosscheck._compare.record import Comparison, Kinks
from crosscheck._workloads.model import compare as model_compare
from crosscheck._workloads.model import groups, spending
from crosscheck._workloads.model.findings import Findings, Judging, Record
from crosscheck._workloads.model.oracle.function import Differences, Skip, localize
from crosscheck._workloads.model.rounding import Rounding
from crosscheck._workloads.model.verdict import clauses, loss_text, verdict
from crosscheck._workloads.model.zeros import CONFIRMED, judged, reach, unreached_problem
from crosscheck._workloads.model.zeros import problems as zero_problems

EMPTY = (
    "the check is empty: the gradient of the loss is at rounding level in every parameter (a gradient "
    "of zeros would pass for {who}), so nothing was checked; the loss is flat in the parameters (e.g. "
    "sum(outputs ** 2) after a normalization is constant): use a loss that depends on them, such as "
    "crosscheck.projection_loss(outputs), a fixed random projection"
)


def against_oracle(
    judge: Judging, record: Record, diffs: Differences, question: str, reference: str, call: Any
) -> list[Comparison]:
    """``record``'s gradient against one function's differences (entry by entry or along directions)."""
    ctx = judge.context(record.name, reference, question, diffs.function)
    value, rounding = record.gradient, record.rounding
    if diffs.entries is not None:
        est = diffs.entries
        found, zeros = model_compare.entries(
            ctx, value, rounding, _answer(est.value, est.error, est.unjudgeable, est.reason), {}
        )
        record.add(found, zeros, question)
        return found
    assert diffs.directions is not None
    bad = {k: _malformed(ctx, k, value) for k in ctx.shapes}
    filled = {k: np.zeros(s) if bad[k] else value[k] for k, s in ctx.shapes.items()}
    good = [k for k in ctx.shapes if not bad[k]]
    screens = groups.bisect(judge, ctx, good, filled, rounding, diffs, call)
    found = _screened(judge, ctx, screens, diffs, value, rounding, call)
    by_name = {c.parameter: c for c in found}
    found = [bad[k] or by_name[k] for k in ctx.shapes]
    record.add(found, {k: screens[k].zero for k in good if screens[k].row is not None}, question)
    return found


def _malformed(ctx: model_compare.Context, k: str, value: dict) -> Comparison | None:
    """The invalid comparison of a parameter missing or malformed in ``value`` (None when it is fine)."""
    if k not in value:
        return model_compare.missing(ctx, k, value)
    problem = structural_problem(np.asarray(value[k]), ctx.shapes[k], ctx.dtype)
    if not problem:
        return None
    return model_compare.invalid(ctx, k, f"parameter `{k}`: {problem}")


def _screened(judge, ctx, screens: dict, diffs: Differences, value, rounding, call) -> list[Comparison]:
    assert diffs.directions is not None
    per = judge.differencing.per_parameter
    rows = {k: s.row for k, s in screens.items() if s.alone and s.row is not None}
    failing, notes = groups.localizable(diffs, rows, value)
    problem = localize(diffs, failing, judge.point, call, judge.progress) if failing else None
    out = []
    for k, screen in screens.items():
        coverage = groups.coverage(screen, per)
        if screen.row is None:
            out.append(groups.not_screened(ctx, k, screen.problem))
            continue
        if k in failing and problem is None:
            v, e, u, r = diffs.localized[k]
            answer = _answer({k: v}, {k: e}, {k: u}, {k: r})
            more = f"{coverage}, then every entry (a direction disagreed)"
            sub = dataclasses.replace(ctx, shapes={k: ctx.shapes[k]})
            found, _ = model_compare.entries(sub, {k: value[k]}, _only(rounding, k), answer, {k: more})
            out += found
            continue
        note = notes.get(k, "") if problem is None else f"not checked entry by entry: {problem}"
        out.append(model_compare.screened(ctx, k, screen.row, screen.est, value[k], coverage, note))
    return out


def _only(rounding: Rounding, k: str) -> Rounding:
    delta = None if rounding.delta is None else {k: rounding.delta[k]}
    return dataclasses.replace(rounding, term={k: rounding.term[k]}, delta=delta)


def _answer(value, error, unjudgeable, reason) -> model_compare.Answer:
    kinks, errors = {}, {}
    for k, v in value.items():
        none = Kinks.none(v.shape)
        kinks[k] = (
            none
            if unjudgeable is None
            else dataclasses.replace(none, unjudgeable=unjudgeable[k], reason=reason[k])
        )
        errors[k] = np.zeros(v.shape) if error is None else error[k]
    return model_compare.Answer(value, errors, kinks)


# -- the summary -----------------------------------------------------------------------------------------


def summarize(findings: Findings, reference: Any, dtype: str = "float64") -> dict[str, Any]:
    """The report's ``oracle`` section (see the module docstring) of a check in ``dtype``."""
    records = list(findings.records.values())
    out: dict[str, Any] = {
        "mode": findings.differencing.mode,
        "why": findings.differencing.why,
        "differentiates": findings.differentiates,
    }
    if not findings.oracle:
        out = {"reference": "a backend (no oracle)"}
    if findings.differencing.mode == "screen" and findings.oracle:
        out["directions_per_parameter"] = findings.differencing.per_parameter
    out["evaluations"] = _evaluations(findings)
    out["seconds"] = _evaluations(findings, seconds=True)
    out.update(spending.section(findings, records))
    out["coverage"] = _coverage(records)
    out["own_loss"] = {r.name: _own_state(r.own) for r in records if r.own is not None}
    out["precision"] = _precision(records)
    out["losses"] = {r.name: r.loss for r in records if r.loss is not None}
    empty = [r for r in records if r.zeros and all(r.zeros.values())]
    zero = _zero_everywhere(findings, records) if not empty else {"exactly": [], "within rounding": []}
    out["zero_in_every_implementation"] = zero
    named = zero["exactly"] + zero["within rounding"]
    if not findings.oracle:
        sides = [findings.reference_name] + [r.name for r in records]
        out["zero_checks"] = {
            k: {s: c.to_dict() for s, c in findings.zero_checks.get(k, {}).items()} for k in named
        }
        outcome = judged(findings.zero_checks, named, sides)
        confirmed = outcome["confirmed"]
        out["zero_confirmed_without"] = {c.parameter: f"`{c.side}`: {c.why}" for c in outcome["one side"]}
    else:
        confirmed = [
            k for k in named if all(c.passed for r in records for c in r.comparisons if c.parameter == k)
        ]
    out["reach"] = reach(findings.unreached, findings.unused, named, confirmed)
    cut = out["reach"]["unreached"] + out["reach"]["declared unused"]
    out["zero_confirmed"] = [k for k in confirmed if k not in cut]
    out["verdict"] = [verdict(findings, r) for r in records]
    out["questions"] = {r.name: {q: a.to_dict() for q, a in clauses(findings, r).items()} for r in records}
    out["notes"] = [r.rounding.how for r in records if not r.rounding.honest]
    out["problems"] = _problems(findings, records, zero)
    if out["reach"]["unreached"]:
        out["problems"].append(unreached_problem(out["reach"]["unreached"]))
    out["lines"] = _lines(out, zero, dtype)
    return out


def _evaluations(findings: Findings, *, seconds: bool = False) -> dict[str, Any]:
    """Per function differenced: the loss evaluations the oracle used (or the seconds it took)."""
    found = [findings.anchor] + [r.own for r in findings.records.values() if isinstance(r.own, Differences)]
    return {
        d.function.label: round(d.seconds, 3) if seconds else d.evaluations for d in found if d is not None
    }


def _coverage(records: list[Record]) -> dict[str, list[str]]:
    entry: set[str] = set()
    directions: set[str] = set()
    grouped: set[str] = set()
    for r in records:
        for c in r.comparisons:
            if c.status == "invalid" or c.parameter is None:
                continue
            (
                directions if c.coverage.startswith("screened") and "every entry" not in c.coverage else entry
            ).add(c.parameter)
            if "in a group of" in c.coverage:
                grouped.add(c.parameter)
    only = sorted(directions - entry)
    return {"entry by entry": sorted(entry), "along directions only": only, "in a group": sorted(grouped)}


def _own_state(own: Differences | Skip) -> str:
    return "differenced" if isinstance(own, Differences) else own.reason


def _precision(records: list[Record]) -> dict[str, dict[str, Any]]:
    """Per implementation whose own loss was probed: its noise, and whether it is float32's."""
    found = {r.name: r.own.function.precision for r in records if isinstance(r.own, Differences)}
    return {k: p.to_dict() for k, p in found.items() if p is not None}


def _zero_everywhere(findings: Findings, records: list[Record]) -> dict[str, list[str]]:
    """Parameters whose gradient is exactly zero, or zero within rounding, in every implementation."""
    grads = [r.gradient for r in records]
    if findings.reference_gradient is not None:
        grads.append(findings.reference_gradient)
    exact: list[str] = []
    rounding: list[str] = []
    if not records:
        return {"exactly": exact, "within rounding": rounding}
    for k, shape in findings.shapes.items():
        present = [np.asarray(g[k]) for g in grads if k in g and np.shape(g[k]) == shape]
        if len(present) != len(grads):
            continue
        if all(not np.any(g) for g in present):
            exact.append(k)
        elif all(all(v for key, v in r.zeros.items() if key.endswith(f"/{k}")) for r in records) and all(
            any(key.endswith(f"/{k}") for key in r.zeros) for r in records
        ):
            rounding.append(k)
    return {"exactly": exact, "within rounding": rounding}


def _problems(findings: Findings, records: list[Record], zero: dict[str, list[str]]) -> list[str]:
    out = []
    empty = [f"`{r.name}`" for r in records if r.zeros and all(r.zeros.values())]
    if empty:
        out.append(EMPTY.format(who=", ".join(empty)))
    for r in records:
        if (
            isinstance(r.own, Skip)
            and r.own.failure
            and not any(r.own.reason in c.message for c in r.comparisons)
        ):
            out.append(r.own.reason)  # unless a parameter not checked already says it
        if r.loss is not None and not r.loss["passed"]:
            out.append(f"`{r.name}`'s float64 loss differs from {r.loss['against']}'s: {loss_text(r.loss)}")
    if not findings.oracle and not empty:
        named = zero["exactly"] + zero["within rounding"]
        sides = [findings.reference_name] + [r.name for r in records]
        out += zero_problems(judged(findings.zero_checks, named, sides))
    return out


def _lines(out: dict[str, Any], zero: dict[str, list[str]], dtype: str) -> list[str]:
    lines = list(out["verdict"]) + list(out["notes"])
    lines += [p["text"] for p in out["precision"].values() if p["text"]]
    cov = out["coverage"]
    if cov["along directions only"]:
        lines.append(
            f"coverage: {len(cov['entry by entry'])} parameters entry by entry, "
            f"{len(cov['along directions only'])} along {out.get('directions_per_parameter')} random "
            f"directions each only ({out.get('why')})"
        )
    if cov["in a group"]:
        lines.append(
            f"screening by groups: {len(cov['in a group'])} parameters judged in a group of tensors (random "
            "directions touching every tensor of the group; a group is halved where a direction disagrees)"
        )
    lines += _zero_lines(out, zero, dtype)
    declared = out["reach"]["declared unused"]
    if declared:
        shown = ", ".join(f"`{k}`" for k in declared)
        lines.append(f"declared unused (`unused=`): {shown}: the loss does not reach them; not checked")
    evaluations = out.get("evaluations") or {}
    if evaluations:
        lines.append("oracle evaluations: " + ", ".join(f"{k} {v}" for k, v in evaluations.items()))
    lines += spending.lines(out)
    return lines


def _zero_lines(out: dict[str, Any], zero: dict[str, list[str]], dtype: str) -> list[str]:
    """The parameters whose gradient is zero in every implementation. In a 16-bit dtype "within
    rounding" is no claim of a zero: a bias whose gradient is 1e-2 is within bfloat16's rounding of
    zero, so those are said to be indistinguishable from zero at that rounding, not zero."""
    low = dtype in STORAGE_ROUNDOFF
    parts = [f"`{k}` (exactly)" for k in zero["exactly"]]
    if not low:
        parts += [f"`{k}` (within rounding)" for k in zero["within rounding"]]
    how = "; judged against zero by the oracle" if out.get("mode") else _confirmed(out)
    lines = [f"zero gradient in every implementation: {', '.join(parts)}{how}"] if parts else []
    if low and zero["within rounding"]:
        shown = ", ".join(f"`{k}`" for k in zero["within rounding"])
        lines.append(
            f"indistinguishable from zero at {dtype}'s rounding in every implementation: {shown} (a gradient "
            f"of zeros would pass; whether it is zero is not seen in {dtype}: check in float32 too)"
            + ("" if out.get("mode") else _confirmed(out))
        )
    return lines


def _confirmed(out: dict[str, Any]) -> str:
    """With a backend as reference: which zero gradients the oracle confirmed (``zeros``)."""
    confirmed = out.get("zero_confirmed") or []
    if not confirmed:
        return "; no zero by construction confirmed"
    without = out.get("zero_confirmed_without") or {}
    shown = ", ".join(f"`{k}`" + (f" (not on {without[k]})" if k in without else "") for k in confirmed)
    return f"; {CONFIRMED}: " + shown
