"""What the model oracle spent, for the report's ``oracle`` section: how each loss was evaluated
(``oracle.batched``: many points a call, or one, and why) and its budget (``oracle.budget``)."""

from __future__ import annotations

from typing import Any

from crosscheck._workloads.model.findings import Findings, Record
from crosscheck._workloads.model.oracle.batched import Batched
from crosscheck._workloads.model.oracle.budget import line as budget_line
from crosscheck._workloads.model.oracle.function import Differences


def section(findings: Findings, records: list[Record]) -> dict[str, Any]:
    """``batching`` (per function whose implementation can evaluate many points a call: how its
    evaluations were made) and, with a budget given or the default's run out, ``budget``
    (``Clock.summary``)."""
    found = [findings.anchor] + [r.own for r in records if isinstance(r.own, Differences)]
    out: dict[str, Any] = {
        "batching": {
            d.function.label: d.function.fn.note()
            for d in found
            if d is not None and isinstance(d.function.fn, Batched)
        }
    }
    if findings.differencing.clock.said:
        out["budget"] = findings.differencing.clock.summary(*_judged(findings, records))
    return out


def _judged(findings: Findings, records: list[Record]) -> tuple[int, int]:
    """Parameters every candidate's comparisons judged (none "not checked"), and parameters in all."""
    invalid = {c.parameter for r in records for c in r.comparisons if c.status == "invalid"}
    compared = {c.parameter for r in records for c in r.comparisons}
    return len([k for k in findings.shapes if k in compared and k not in invalid]), len(findings.shapes)


def lines(out: dict[str, Any]) -> list[str]:
    """The lines after the table: the budget, and the losses batched or that could not be."""
    said = [budget_line(out["budget"])] if "budget" in out else []
    batching = {
        k: v for k, v in (out.get("batching") or {}).items() if not v.startswith("one call a point (")
    }
    if batching:
        said.append("oracle batching: " + "; ".join(f"{k}: {v}" for k, v in batching.items()))
    return said
