"""The built-in CI matrix: the stack's cases that ``crosscheck sweep`` (``nox -s crosscheck``) runs
without a ``[tool.crosscheck]`` matrix, and the known answers it checks them against (the sweep asks
``Stack.ci_cases`` and ``Stack.known_answer``)."""

from __future__ import annotations

from typing import Any

import numpy as np

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


def known_answer(case: dict[str, Any]) -> float | None:
    """Identity weights with ``x`` all ones: every gradient entry is exactly ``2 * N`` (a case record of
    the stack, ``Report.case``; another workload's has no ``init``, so no known answer)."""
    return 2.0 * case["batch"] if case.get("init") == "identity" else None


def check_known(report: Report) -> str:
    """``"exact"`` when every gradient the run computed is its case's known answer exactly, else what is
    not (``""`` when the case has none). Read from the report: no backend is called again."""
    case = report.case
    expected = known_answer(case)
    if expected is None:
        return ""
    shape = (case["layers"], case["dim"], case["dim"])
    problems = []
    for name, value in report.gradients.items():
        weights = np.asarray(value["weights"])
        if weights.shape != shape or not np.all(weights == expected):
            spec = report.backends[name].notes.get("spec", name)
            problems.append(f"{spec} is not exactly {expected:g} everywhere")
    return "; ".join(problems) or "exact"
