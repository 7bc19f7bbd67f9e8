"""The loop every driver shares: load each candidate backend, evaluate it, record it by a unique name."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from crosscheck._report.report import BackendResult


def run_candidates(
    specs: Sequence[Any],
    load: Callable[[Any], tuple[Any, BackendResult]],
    evaluate: Callable[[Any, BackendResult, str], BackendResult],
    *,
    reference_ran: bool,
    results: dict[str, BackendResult],
) -> None:
    """Load every candidate and, when the reference ran, evaluate it; record each under a unique name.

    ``load(spec)`` returns ``(backend or None, result)``; ``evaluate(backend, result, name)`` computes,
    compares (keeping its own comparisons) and returns the updated result. Every driver (the stack's
    gradient and HVP, workloads) shares this loop, so a candidate is skipped, named and recorded alike.
    """
    for spec in specs:
        backend, result = load(spec)
        name = unique_name(result.name, results)
        if backend is not None and not reference_ran:
            result = dataclasses.replace(result, status="skipped", error="not run: the reference did not run")
        elif backend is not None:
            result = evaluate(backend, result, name)
        results[name] = result


def unique_name(name: str, taken: dict[str, Any]) -> str:
    candidate, n = name, 2
    while candidate in taken:
        candidate, n = f"{name}#{n}", n + 1
    return candidate
