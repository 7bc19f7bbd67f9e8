"""A sweep's case as a task: plain data in, a record out, whatever process runs it (``engine``).

A task is ``{"index", "case", "options", "timeout"}``; ``run_task`` runs it within its timeout and
returns its record, never raising.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from crosscheck._errors import Interrupts, describe, reraise_user_interrupt

STACK = "stack"
STATUSES = ("passed", "failed", "error", "crashed", "timeout")
CRASHED = "the process running this case died (a segfault, an abort or os._exit in a backend)"

Task = dict[str, Any]
CaseRecord = dict[str, Any]
Done = Callable[[CaseRecord], None]


def make_tasks(
    cases: Sequence[dict[str, Any]], options: dict[str, Any], *, timeout: float | None = None
) -> list[Task]:
    """One task per case: ``{"index", "case", "options", "timeout"}``, all plain data."""
    backends = options.get("backends")
    if backends is not None and not all(isinstance(b, str) for b in backends):
        raise TypeError(
            "a sweep's `backends` must be names or import strings (workers build them from text); "
            f"found {', '.join(type(b).__name__ for b in backends if not isinstance(b, str))}."
        )
    return [
        {"index": i, "case": dict(case), "options": dict(options), "timeout": timeout}
        for i, case in enumerate(cases)
    ]


# -- running one case (in whatever process the engine chose) -------------------------------------------


def run_task(task: Task, *, interrupts: Interrupts | None = None) -> CaseRecord:
    """Run one task within its timeout and return its record (never raises, except for the user's
    Ctrl-C under ``interrupts``, the sweep's Ctrl-C policy when the case runs in its process).

    The case runs in a daemon thread that the caller stops waiting for at the timeout: Python cannot
    stop a thread, but the record comes back on time and a leftover thread does not keep a worker alive.
    """
    start = time.perf_counter()
    record = within(task, lambda: _execute(task, interrupts))
    record["seconds"] = time.perf_counter() - start
    return record


def within(task: Task, run: Callable[[], CaseRecord], *, said: str = "--timeout") -> CaseRecord:
    """``run()``'s record, or a ``timeout`` record once ``task["timeout"]`` seconds pass (None: no
    limit); ``said``: how the limit is named in its message.

    ``run`` goes in a daemon thread that the caller stops waiting for at the timeout: Python cannot
    stop a thread, but the record comes back on time and a leftover thread does not keep a worker alive.
    """
    timeout = task.get("timeout")
    if timeout is None:
        return run()
    box: dict[str, CaseRecord] = {}
    thread = threading.Thread(target=lambda: box.update(r=run()), daemon=True)
    thread.start()
    thread.join(timeout)
    return box.get("r") or _record(task, "timeout", error=f"did not finish within {timeout:g} s ({said})")


def _execute(task: Task, interrupts: Interrupts | None) -> CaseRecord:
    try:
        report, known = _run_case(task["case"], task["options"])
    except BaseException as exc:  # a record, not a crash (a sys.exit too): the other cases go on
        reraise_user_interrupt(exc, interrupts)
        return _record(task, "error", error=describe(exc))
    passed = report.passed and known in ("", "exact")
    problems = list(report.problems)
    if known not in ("", "exact"):
        problems.append(f"known answer: {known}")
    return _record(
        task,
        "passed" if passed else "failed",
        error="; ".join(problems),
        known_answer=known,
        report=report.to_dict(),
    )


def _run_case(case: dict[str, Any], options: dict[str, Any]):
    """Run one case: its workload loaded once and given the options of the case it takes (the stack's
    shape), one request of it and the sweep's options for the engine's ``execute``; then the known
    answer, when it has one."""
    from crosscheck._backends import as_options, placements
    from crosscheck._engine.execute import execute
    from crosscheck._engine.request import Request
    from crosscheck._records import Execution, Slack
    from crosscheck._workloads.registry import load_workload

    case = dict(case)
    workload = load_workload(case.pop("workload", STACK))
    knobs = {k: v for k, v in case.items() if k not in ("dtype", "seed")}
    if knobs:
        workload = workload.configure(**knobs)
    placement: dict[str, Any] = as_options(placements(options))  # jax_platform, ...: Execution's fields
    request = Request(
        workload=workload,  # loaded here: its known answer judges the report
        quantity=workload.quantities[0],  # a Train's is the update (with its own steps), others' the gradient
        backends=options.get("backends"),
        reference=options.get("reference", "numpy-fd"),
        dtype=case.get("dtype", "float32"),
        seed=case.get("seed", 0),
        slack=Slack.of(options.get("rtol"), options.get("atol")),
        strict=options.get("strict", False),
        # A case's process is its isolation (a worker per case), or, with --jobs 0, there is none: no
        # worker per backend inside a case.
        execution=Execution(isolate=options.get("isolate", False), **placement),
    )
    report = execute(request)
    return report, workload.known_answer(report)


def _record(task: Task, status: str, *, error: str = "", known_answer: str = "", report=None) -> CaseRecord:
    return {
        "index": task["index"],
        "case": task["case"],
        "status": status,
        "passed": status == "passed",
        "error": error,
        "known_answer": known_answer,
        "seconds": None,
        "report": report,
    }


def _crashed(task: Task) -> CaseRecord:
    return _record(task, "crashed", error=CRASHED)
