"""``execute(request) -> Report``: the one path every check takes (``check``, ``run``, the CLI, a sweep's
case, the pytest helper); a replay is a verb of its own (``crosscheck._replay``).

It checks the request's rules, then decides where it runs: a workload given as an import string (code
from elsewhere) runs its whole check in one worker process (``contain``), unless
``execution.isolate`` is False or a backend is an object, which cannot be sent; everything else runs in
this process. There, the workload is loaded once, configured with the options it takes, planned (its
memory estimated first: a case that cannot fit is refused before anything is allocated), announced
(``request.announce``, the CLI's notes) and driven. A worker runs ``job``, the job of a contained
check: it is handed the request as data and runs it there (the worker is its process: where a request
runs is the job's to know, never a field of the request).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from crosscheck._backends import as_options
from crosscheck._engine.classify import classified
from crosscheck._engine.driver import drive
from crosscheck._engine.plan import Outlook, check_records, plan, start_environment
from crosscheck._engine.process import contain
from crosscheck._engine.request import Request, check_request, configure, with_reference
from crosscheck._report.report import Report
from crosscheck._workloads import protocol
from crosscheck._workloads.protocol import Progress
from crosscheck._workloads.registry import load_workload

#: What a contained check's worker runs: ``job``, below (crosscheck's own, never the CLI's).
JOB = "crosscheck._engine.execute:job"


def execute(request: Request) -> Report:
    """Run ``request``'s check: its ``Report``.

    Raises:
        ValueError, TypeError: a bad request, in one line (a mismatch is a record, never raised).
    """
    request = _checked(request)
    if _contained(request):
        return _check_contained(request)
    return _check_here(request)


def _check_here(request: Request) -> Report:
    """The checked ``request`` run in this process (``_driven``), then classified where its JAX side ran
    on an accelerator: the re-runs are made here, in the process that holds the device, and each is
    driven, never classified again (``classify``)."""
    return classified(request, _driven(request), _driven)


def _driven(request: Request) -> Report:
    """The checked ``request`` run in this process: loaded, configured, planned, announced, driven; its
    wall time counted from before the workload is loaded (the model oracle's budget: ``Options.started``)."""
    started = protocol.now()
    workload = configure(load_workload(request.workload), request)
    planned = plan(workload, request, started=started)
    if request.announce is not None:
        request.announce(Outlook.of(planned))
    return drive(planned)


def _checked(request: Request) -> Request:
    if not isinstance(request, Request):
        raise TypeError(f"`request` must be a Request, found {type(request).__name__}.")
    check_records(request.slack, request.oracle, request.execution, request.backends)
    request = with_reference(request)
    check_request(request)
    return request


def _contained(request: Request) -> bool:
    """Whether the check runs in a worker: a workload's import string, ``isolate`` not False and every
    backend a spec (a name or an import string) that can be sent."""
    backends = request.backends
    specs = [request.reference, *(backends if isinstance(backends, (list, tuple)) else [])]
    wanted = contain.wanted(request.workload, request.execution.isolate)
    return wanted and all(isinstance(s, str) for s in specs)


def _check_contained(request: Request) -> Report:
    """The check in a worker; a worker that died or hung is a failed report that names the workload."""
    announce = None
    if request.announce is not None:
        tell = request.announce
        announce = lambda data: tell(Outlook(**data))  # noqa: E731 (the worker's outlook, as data)

    def stopped(why: contain.WorkerStopped) -> Report:
        return contain.halted(
            request.workload,
            why,
            reference=request.reference,
            placement=as_options(request.execution.placement),
            **request.case,
        )

    report: Report = contain.in_worker(
        JOB,
        request.to_data(),
        stopped=stopped,
        timeout=request.execution.timeout,
        progress=request.progress,
        announce=announce,
        env=start_environment(request.execution.placement),
    )
    return report


def job(data: dict[str, Any], *, progress: Progress | None, announce: Callable[[Any], None]) -> Report:
    """In a contained check's worker: the request the parent checked, rebuilt from ``data`` and run here
    (never in yet another worker); ``announce`` sends the outlook to the parent, as data."""
    said = _send(announce) if data.pop("announce") else None
    return _check_here(Request.from_data(data, progress=progress, announce=said))


def _send(announce: Callable[[Any], None]) -> Callable[[Outlook], None]:
    return lambda outlook: announce({"memory": outlook.memory, "cost": outlook.cost})
