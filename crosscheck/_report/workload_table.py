"""The terminal table of a workload's report: one row per (backend, parameter)."""

from __future__ import annotations

from typing import Any

from crosscheck._report.report import Report


def title(report: Report) -> str:
    """``workload=mlp-gelu, dtype=float32, seed=0, parameters w1 (4, 8), b1 (8,), ...``."""
    case = report.case
    shapes = ", ".join(f"{k} {tuple(v)}" for k, v in case["parameters"].items())
    line = f"crosscheck: workload={case['workload']}, dtype={case['dtype']}, seed={case['seed']}; {shapes}"
    source = case.get("oracle_differentiates", "reference")
    if source.startswith("surrogate"):
        line += "\nthe oracle differentiates the workload's surrogate, built at this point"
    elif source != "reference":
        line += f"\nthe oracle differentiates {source}"
    return line


#: The table's "check" column: which question a comparison answers.
_CHECK = {"derivative": "derivative", "same function": "function"}


def workload_table(report: Report) -> Any:
    """A rich table: the reference, then each candidate's row per parameter (or its failure)."""
    from rich.table import Table

    t = Table(title=title(report), title_justify="left")
    checks = any(c.question for c in report.comparisons)
    columns = ("backend", "parameter", *(("check",) if checks else ()), "dtype", "time")
    for column in (*columns, "max abs diff", "max rel diff"):
        t.add_column(column, justify="left" if column in ("backend", "parameter", "check") else "right")
    for column in ("worst index", "tolerance there", "decided by", "unjudgeable", "verdict"):
        t.add_column(column, justify="right")
    by_backend: dict[str, list] = {}
    for c in report.comparisons:
        by_backend.setdefault(c.backend, []).append(c)
    for name, r in report.backends.items():
        time_s = f"{r.seconds:.3f}s" if r.seconds is not None else "-"
        rows = by_backend.get(name, [])
        if r.role == "reference" or not rows:
            failed = r.status == "failed" or (r.status == "unavailable" and r.required)
            verdict = "reference" if r.role == "reference" and r.status == "ok" else r.status
            t.add_row(
                name, "", *[""] * checks, r.dtype or "-", time_s, *[""] * 6,
                f"[red]{verdict}[/red]" if failed else verdict,
            )  # fmt: skip
            continue
        for i, c in enumerate(rows):
            shown = (name, time_s) if i == 0 else ("", "")
            verdict = "[green]ok[/green]" if c.passed else "[red]FAIL[/red]"
            check = (_CHECK.get(c.question or "", ""),) if checks else ()
            if c.max_abs_diff is None:
                where = "dirs" if c.coverage.startswith("screened") else ""
                t.add_row(shown[0], c.parameter, *check, r.dtype or "-", shown[1], "", "", where, "",
                          c.decided_by or "", str(c.unjudgeable or ""), verdict)  # fmt: skip
                continue
            t.add_row(
                shown[0],
                c.parameter,
                *check,
                r.dtype or "-",
                shown[1],
                f"{c.max_abs_diff:.3g}",
                f"{c.max_rel_diff:.3g}",
                str(tuple(c.worst_index or ())),
                f"{sum((c.worst_terms or {}).values()):.3g}",
                c.decided_by or "",
                f"{c.unjudgeable}/{c.total}" if c.unjudgeable else "0",
                verdict,
            )
    return t


def workload_summary(report: Report) -> str:
    """The PASSED line: how many candidates agree on how many parameters."""
    backends = sorted({c.backend for c in report.comparisons})
    parameters = sorted({c.parameter for c in report.comparisons if c.parameter is not None})
    unjudged = sum(c.unjudgeable for c in report.comparisons)
    tail = f"; {unjudged} entries the oracle could not judge" if unjudged else ""
    return (
        f"{len(backends)} candidate(s) agree with `{report.reference}` on all {len(parameters)} "
        f"parameters{tail}"
    )
