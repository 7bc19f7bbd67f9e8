"""``crosscheck.check`` and ``crosscheck.run`` of a workload given as an import string: contained, in
one worker process (``crosscheck._engine.contain``), as on the command line.

The worker gets the workload's import string, the options ``run`` changed from their defaults (arrays
included) and the records' fields as data; it configures the workload and calls ``check`` there with
``isolate`` as given (an import string among the backends gets a worker of its own, there). A backend
or reference given as an object cannot be sent, so such a call runs in process, as does any call with
``isolate=False`` or a workload given as an object.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from crosscheck._engine import contain
from crosscheck._engine.records import Execution, Oracle, Slack
from crosscheck._report.report import Report

#: What the worker runs: ``job``, below.
JOB = "crosscheck._engine.contained_run:job"


def wanted(workload: Any, backends: Sequence[Any] | None, reference: Any, execution: Any) -> bool:
    """Whether this call of ``check`` runs contained: a workload's import string, ``isolate`` not False
    and every backend a spec (a name or an import string) that can be sent."""
    specs = [reference, *(backends if isinstance(backends, (list, tuple)) else [])]
    isolate = execution.isolate if isinstance(execution, Execution) else False
    return contain.wanted(workload, isolate) and all(isinstance(s, str) for s in specs)


def check(
    workload: str,
    knobs: dict[str, Any] | None,
    *,
    slack: Slack | None,
    oracle: Oracle,
    execution: Execution,
    progress: Any,
    **given: Any,
) -> Report:
    """``crosscheck.check(workload, **given)`` in a worker, the workload configured with ``knobs`` as
    ``run`` does (None: not configured, as ``check`` takes it); a worker that died or hung is a failed
    report that names the workload."""
    request = {
        "workload": workload,
        "knobs": knobs,
        "slack": None if slack is None else [slack.rtol, slack.atol],
        "oracle": [oracle.mode, oracle.directions, oracle.budget],
        "execution": [execution.repeat, execution.isolate, execution.timeout],
        **given,
    }
    try:
        report: Report = contain.contained(JOB, request, timeout=execution.timeout, progress=progress)
    except contain.WorkerStopped as stopped:
        case = {"dtype": given.get("dtype"), "seed": given.get("seed")}
        return contain.halted(workload, stopped, reference=given.get("reference"), **case)
    return report


def job(request: dict[str, Any], *, progress: Any) -> Report:
    """In the worker: the workload loaded and configured, then ``check``."""
    from crosscheck._engine import run
    from crosscheck._workloads.registry import load_workload

    knobs, chosen = request.pop("knobs"), load_workload(request.pop("workload"))
    if knobs is not None:  # as ``run`` does
        chosen = run.configure(chosen, knobs, quantity=request["quantity"])
    slack = request.pop("slack")
    repeat, isolate, timeout = request.pop("execution")
    return run.check(
        chosen,
        slack=None if slack is None else Slack(*slack),
        oracle=Oracle(*request.pop("oracle")),
        execution=Execution(repeat=repeat, isolate=isolate, timeout=timeout),
        progress=progress,
        **request,
    )
