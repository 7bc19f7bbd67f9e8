"""The CI matrix: a fixed list of cases run by ``crosscheck matrix`` and ``nox -s crosscheck``."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from crosscheck._engine.run import run
from crosscheck._report.report import Report
from crosscheck._workloads.stack.case import Case

#: The cases of ``nox -s crosscheck``: known answers, random shapes and seeds, exact zeros, near-kinks.
CASES: tuple[Case, ...] = (
    Case(layers=8, batch=1, dim=2, init="identity"),
    Case(layers=3, batch=1, dim=2, init="identity"),
    Case(layers=8, batch=1, dim=2, init="identity", dtype="float64"),
    Case(layers=8, batch=2, dim=4, seed=0),
    Case(layers=8, batch=8, dim=16, seed=1),
    Case(layers=8, batch=32, dim=64, seed=2),
    Case(layers=1, batch=3, dim=5, seed=3),
    Case(layers=8, batch=4, dim=8, seed=4, dtype="float64"),
    Case(layers=8, batch=16, dim=32, seed=5, dtype="float64"),
    Case(layers=8, batch=8, dim=16, seed=6, init="integer"),
    Case(layers=8, batch=8, dim=8, seed=7, init="integer", dtype="float64"),
    Case(layers=8, batch=8, dim=16, seed=8, init="nearzero"),
)


@dataclasses.dataclass(frozen=True)
class MatrixRow:
    case: Case
    report: Report
    known_answer: str  # "" when the case has none, else "exact" or what went wrong

    @property
    def passed(self) -> bool:
        return self.report.passed and self.known_answer in ("", "exact")


def known_answer(case: Case) -> float | None:
    """Identity weights with ``x`` all ones: every gradient entry is exactly ``2 * N``."""
    return 2.0 * case.batch if case.init == "identity" else None


def run_matrix(
    cases: Sequence[Case] = CASES,
    *,
    backends: Sequence[Any] | None = None,
    strict: bool = False,
    progress: Callable[[str, int, int], None] | None = None,
) -> list[MatrixRow]:
    rows = []
    for i, case in enumerate(cases):
        if progress is not None:
            progress("matrix", i, len(cases))
        report = run(**dataclasses.asdict(case), backends=backends, strict=strict)
        rows.append(MatrixRow(case, report, check_known(case, report)))
    if progress is not None:
        progress("matrix", len(cases), len(cases))
    return rows


def check_known(case: Case, report: Report) -> str:
    """``"exact"`` when every gradient the run computed is the case's known answer exactly, else what is
    not (``""`` when the case has none). Read from the report: no backend is called again."""
    expected = known_answer(case)
    if expected is None:
        return ""
    problems = []
    for name, value in report.gradients.items():
        weights = np.asarray(value["weights"])
        if weights.shape != (case.layers, case.dim, case.dim) or not np.all(weights == expected):
            spec = report.backends[name].notes.get("spec", name)
            problems.append(f"{spec} is not exactly {expected:g} everywhere")
    return "; ".join(problems) or "exact"


def render_matrix(rows: list[MatrixRow], console: Any) -> None:
    from rich.table import Table

    names = []
    for row in rows:
        names += [c.backend for c in row.report.comparisons if c.backend not in names]
    table = Table(title="crosscheck matrix", title_justify="left")
    for column in ("case", *names, "known answer", "verdict"):
        table.add_column(column)
    for row in rows:
        c = row.case
        label = f"{c.init} L={c.layers} N={c.batch} d={c.dim} {c.dtype} seed={c.seed}"
        by_name = {comp.backend: comp for comp in row.report.comparisons}
        cells = []
        for name in names:
            comp = by_name.get(name)
            if comp is None:
                status = row.report.backends.get(name)
                cells.append(status.status if status else "-")
            elif comp.passed:
                near = comp.unjudgeable + comp.two_sided
                extra = f" ({near} kink)" if near else ""
                cells.append(f"ok rel {comp.max_rel_diff:.1e}{extra}")
            else:
                cells.append(f"[red]{comp.status} {comp.mismatched}/{comp.judged}[/red]")
        verdict = "[green]ok[/green]" if row.passed else "[red]FAIL[/red]"
        table.add_row(label, *cells, row.known_answer or "-", verdict)
    console.print(table)
    failed = [r for r in rows if not r.passed]
    for row in failed:
        console.print(
            f"{row.case}: "
            + "; ".join(
                row.report.problems
                + ([f"known answer: {row.known_answer}"] if row.known_answer not in ("", "exact") else [])
            ),
            markup=False,
            highlight=False,
        )
    n = len(rows)
    if failed:
        console.print(f"[red]FAILED[/red]: {len(failed)} of {n} cases disagree")
    else:
        console.print(f"[green]PASSED[/green]: all {n} cases agree")
