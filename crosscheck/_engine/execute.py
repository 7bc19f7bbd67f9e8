"""``execute(request)``: the one path every front door takes (``check``, ``run``, the CLI, a sweep's case,
``replay``, the pytest helper).

It checks the request's rules, then decides where it runs: a workload given as an import string (code
from elsewhere) runs its whole check, or replay, in one worker process (``contain``), unless
``execution.isolate`` is False or a backend is an object, which cannot be sent; everything else runs in
this process. There, the workload is loaded once, configured with the options it takes, planned (its
memory estimated first: a case that cannot fit is refused before anything is allocated), announced
(``request.announce``, the CLI's notes) and driven. A worker runs ``job``, the one job of a contained
run, which rebuilds the request and calls ``execute`` there.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from crosscheck._compare.record import keeps_plot_arrays, plot_arrays
from crosscheck._engine import rerun
from crosscheck._engine.classify import classified
from crosscheck._engine.driver import drive
from crosscheck._engine.plan import Outlook, check_records, plan
from crosscheck._engine.process import contain
from crosscheck._engine.request import Request, check_request, configure, with_reference
from crosscheck._errors import one_line
from crosscheck._report.report import Report
from crosscheck._workloads.registry import load_workload

#: What a contained run's worker runs: ``job``, below (crosscheck's own, never the CLI's).
JOB = "crosscheck._engine.execute:job"


def execute(request: Request) -> Any:
    """Run ``request``: a ``Report`` of its check, or, for a request with a ``bundle``, the replay's rows
    (``replay.replay`` says what they hold).

    Raises:
        ValueError, TypeError: a bad request, in one line (a mismatch is a record, never raised).
    """
    request = _checked(request)
    if keeps_plot_arrays():  # a caller's ``with plot_arrays():`` asks as ``plot`` does (a worker too)
        request = dataclasses.replace(request, plot=True)
    if request.bundle is not None:
        return _replay(request)
    if _contained(request):
        return _check_contained(request)
    workload = configure(load_workload(request.workload), request)
    planned = plan(
        workload,
        backends=request.backends,
        reference=request.reference,
        quantity=request.quantity,
        slack=request.slack,
        strict=request.strict,
        oracle=request.oracle,
        execution=request.execution,
        progress=request.progress,
        **request.case,
    )
    if request.announce is not None:
        request.announce(Outlook.of(planned))
    with plot_arrays(request.plot):
        report = drive(planned)
    return classified(request, report, execute)


def _checked(request: Request) -> Request:
    if not isinstance(request, Request):
        raise TypeError(f"`request` must be a Request, found {type(request).__name__}.")
    if request.bundle is None:
        check_records(request.slack, request.oracle, request.execution, request.backends)
        request = with_reference(request)
        check_request(request)
    return request


def _contained(request: Request) -> bool:
    """Whether the check runs in a worker: a workload's import string, ``isolate`` not False and every
    backend a spec (a name or an import string) that can be sent."""
    backends = request.backends
    specs = [request.reference, *(backends if isinstance(backends, (list, tuple)) else [])]
    wanted = contain.wanted(request.workload, request.execution.isolate) and not request.contained
    return wanted and all(isinstance(s, str) for s in specs)


def _check_contained(request: Request) -> Report:
    """The check in a worker; a worker that died or hung is a failed report that names the workload."""
    try:
        report: Report = _in_worker(request)
    except contain.WorkerStopped as stopped:
        return contain.halted(
            request.workload,
            stopped,
            reference=request.reference,
            jax_settings=request.execution.jax,
            **request.case,
        )
    return report


def _replay(request: Request) -> list[dict[str, Any]]:
    """The replay of ``request.bundle``: in a worker when its workload is a trusted import string (a
    worker that died or hung fails every backend's row, naming the workload), else here."""
    bundle, execution = request.bundle, request.execution
    assert bundle is not None
    spec = bundle["workload"]
    wanted = contain.wanted(spec, execution.isolate) and not request.contained
    if wanted and rerun.trusted(spec, request.trust, workload=True):
        try:
            rows: list[dict[str, Any]] = _in_worker(request)
        except contain.WorkerStopped as stopped:
            return rerun.halted(
                bundle, one_line(f"failed: workload `{spec}`: {stopped} while {stopped.doing}")
            )
        return rows
    return rerun.rerun(bundle, request.trust, execution.timeout, execution.isolate)


def _in_worker(request: Request) -> Any:
    """What ``execute(request)`` returns, run by ``job`` in a worker process (``contain.contained``)."""
    announce = None
    if request.announce is not None:
        tell = request.announce
        announce = lambda data: tell(Outlook(**data))  # noqa: E731 (the worker's outlook, as data)
    data = request.to_data()
    timeout = request.execution.timeout
    return contain.contained(JOB, data, timeout=timeout, progress=request.progress, announce=announce)


def job(data: dict[str, Any], *, progress: Any, announce: Any) -> Any:
    """In a contained run's worker: the request rebuilt, marked as running in its worker (so that it
    runs here, not in yet another worker), then ``execute``; ``announce`` sends the outlook to the
    parent, as data."""
    said = _send(announce) if data.pop("announce") else None
    request = Request.from_data({**data, "contained": True}, progress=progress, announce=said)
    return execute(request)


def _send(announce: Any) -> Any:
    return lambda outlook: announce({"memory": outlook.memory, "cost": outlook.cost})
