"""Sweeps: run many cases in parallel processes on this machine, or on a Dask cluster, crash-proof.

A case travels as plain data (a dict: the workload, what rebuilds its inputs, and the run options with
backends as names or import strings). Every worker builds its inputs and backends from that dict, never
from pickled arrays or backend objects, so a sweep gives the same per-case records whichever way it ran.

A case that raises, crashes its process (a segfault, an abort, ``os._exit``) or runs past its timeout is
a record with that status; the other cases go on.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import multiprocessing
import os
import re
import signal
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from crosscheck._backends import install_hint
from crosscheck._errors import Interrupted, Interrupts
from crosscheck._records import placement_keywords
from crosscheck._sweep.task import (  # the tasks and records, which moved there
    STACK,
    STATUSES,
    CaseRecord,
    Done,
    Task,
    _crashed,
    _record,
    make_tasks,
    run_task,
)

# -- engines -------------------------------------------------------------------------------------------


def run_in_process(tasks: Iterable[Task], done: Done, *, interrupts: Interrupts | None = None) -> None:
    """Every task here, one after the other (no isolation: a crashing backend ends the sweep). A case
    that a Ctrl-C interrupted ends the sweep: its record is kept, the rest are not run. ``interrupts``:
    the sweep's Ctrl-C policy (``_interrupts``)."""
    for task in tasks:
        record = run_task(task, interrupts=interrupts)
        done(record)
        if (record.get("report") or {}).get("interrupted"):
            raise KeyboardInterrupt


def run_processes(tasks: Iterable[Task], done: Done, *, jobs: int) -> None:
    """The tasks on ``jobs`` worker processes of this machine (started with ``spawn``: JAX and
    ``fork`` do not mix). When a worker dies the pool breaks and every case then running in it is lost;
    each is re-run alone, so the crash is pinned on the case that caused it."""
    pending = collections.deque(tasks)
    while pending:
        lost = _pool_pass(pending, done, jobs=jobs)
        if len(lost) == 1:
            done(_crashed(lost[0]))
            continue
        for task in lost:
            if _pool_pass(collections.deque([task]), done, jobs=1):
                done(_crashed(task))


def _pool_pass(pending: collections.deque[Task], done: Done, *, jobs: int) -> list[Task]:
    """Run tasks from ``pending`` on a fresh pool until it is empty or the pool breaks; return the
    tasks that were running when it broke.

    The workers ignore SIGINT: a Ctrl-C (or a SIGTERM the caller turned into ``KeyboardInterrupt``)
    is the parent's, which kills every worker at once (a worker may be stuck in a backend) and lets
    the interrupt go on, so that no worker, nor the resource tracker they keep alive, outlives it.
    """
    context = multiprocessing.get_context("spawn")
    running: dict[Future, Task] = {}
    lost: list[Task] = []
    broken = False  # a worker died: submit no more, collect what was running
    pool = ProcessPoolExecutor(max_workers=jobs, mp_context=context, initializer=_ignore_sigint)
    try:
        while pending or running:
            # At most `jobs` cases in flight: a break then loses only cases that had really started.
            while pending and len(running) < jobs and not (lost or broken):
                task = pending.popleft()
                try:
                    running[pool.submit(run_task, task)] = task
                except BrokenProcessPool:  # a worker died since the last wait: this task never started
                    pending.appendleft(task)
                    broken = True
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in finished:
                task = running.pop(future)
                try:
                    done(future.result())
                except BrokenProcessPool:
                    lost.append(task)
            if (lost or broken) and not running:
                break
    except BaseException:
        _kill_workers(pool)
        raise
    pool.shutdown(wait=True)
    return sorted(lost, key=lambda t: t["index"])


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _kill_workers(pool: ProcessPoolExecutor) -> None:
    """Kill the pool's worker processes and drop its queued work, without waiting for any case."""
    processes = list((getattr(pool, "_processes", None) or {}).values())
    for process in processes:
        with contextlib.suppress(Exception):
            process.kill()
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        with contextlib.suppress(Exception):
            process.join(timeout=5)


def run_dask(
    tasks: Iterable[Task], done: Done, *, scheduler: str, fn: Callable[[Task], CaseRecord] = run_task
) -> None:
    """The tasks on the Dask cluster at ``scheduler``; each is a plain-data task, run by ``fn`` (a
    module-level function a worker imports: ``run_task``, or a blockwise check's ``run_block_task``).

    At most as many cases are in flight as the cluster has threads. When a worker dies, Dask fails the
    cases it held (``KilledWorker``, after its own ``distributed.scheduler.allowed-failures`` retries);
    a case may only have been queued on that worker, so each such case runs again alone on the cluster
    (nothing else in flight), and is reported as crashed when that kills a worker too.
    """
    try:
        from distributed import Client, as_completed
        from distributed.scheduler import KilledWorker
    except ImportError as exc:
        raise ImportError(
            f"`--scheduler` needs Dask's distributed, which is not installed: {install_hint('dask')}."
        ) from exc
    check_scheduler(scheduler)
    try:
        client = Client(scheduler, set_as_default=False)
    except (OSError, ValueError) as exc:  # unreachable (a timeout is an OSError) or a malformed address
        raise ValueError(f"`--scheduler` {scheduler}: cannot connect: {exc}") from exc
    pending = collections.deque(tasks)
    suspects: collections.deque[Task] = collections.deque()
    with client:
        slots = max(1, sum(client.nthreads().values()))
        running: dict[Any, Task] = {}
        alone: set[int] = set()  # indices of suspects now running by themselves
        completed = as_completed(loop=client.loop)

        def submit(task: Task) -> None:
            future = client.submit(fn, task, pure=False)
            running[future] = task
            completed.add(future)

        def refill() -> None:
            if suspects:  # drain, then one suspect at a time
                if not running:
                    task = suspects.popleft()
                    alone.add(task["index"])
                    submit(task)
                return
            while pending and len(running) < slots:
                submit(pending.popleft())

        refill()
        for future in completed:
            task = running.pop(future)
            try:
                done(future.result())
            except KilledWorker:
                if task["index"] in alone:
                    done(_crashed(task))
                else:
                    suspects.append(task)
            except Exception as exc:  # the cluster failed the task: a record, not a crash
                done(_record(task, "error", error=f"{type(exc).__name__}: {exc}"))
            refill()


def check_scheduler(address: str) -> None:
    """Raise ``ValueError`` unless ``address`` looks like a scheduler address (``tcp://HOST:PORT``).

    Checked before connecting: Dask's own error leaves a half-built client that takes a minute to go.
    """
    if not re.fullmatch(r"(?:[a-z]+://)?\S+:\d+", address):
        raise ValueError(f"`--scheduler` must be an address like tcp://HOST:8786; found {address!r}.")


# -- the sweep -----------------------------------------------------------------------------------------


def cpu_count() -> int:
    """The CPUs this process may use (a container or ``taskset`` may allow fewer than the machine has)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1


@dataclasses.dataclass(frozen=True)
class SweepResult:
    """Every case's record (in case order) and how the sweep ran."""

    records: list[CaseRecord]
    options: dict[str, Any]
    engine: dict[str, Any]
    config: str | None = None
    #: The signal that stopped it (``"SIGINT"``: Ctrl-C, ``"SIGTERM"``), or None: ``records`` are then
    #: the cases that finished, of ``planned``.
    interrupted: str | None = None
    planned: int = 0

    @property
    def passed(self) -> bool:
        return self.interrupted is None and all(r["passed"] for r in self.records)

    def counts(self) -> dict[str, int]:
        return {status: sum(r["status"] == status for r in self.records) for status in STATUSES}

    def to_dict(self) -> dict[str, Any]:
        """The sweep's JSON: ``passed``, ``summary`` (counts by status), ``cases`` (the records)."""
        return {
            "schema_version": 1,
            "passed": self.passed,
            "summary": {"cases": len(self.records), **self.counts()},
            "config": self.config,
            "options": self.options,
            "engine": self.engine,
            "interrupted": self.interrupted,
            "planned": self.planned,
            "cases": self.records,
        }


def sweep(
    cases: Sequence[dict[str, Any]],
    *,
    backends: Sequence[str] | None = None,
    reference: str = "numpy-fd",
    rtol: float | None = None,
    atol: float | None = None,
    strict: bool = False,
    jax_platform: str = "default",
    jax_precision: str = "default",
    jax_deterministic: str = "default",
    torch_device: str = "default",
    torch_matmul_tf32: str = "default",
    torch_cudnn_tf32: str = "default",
    torch_deterministic: str = "default",
    timeout: float | None = None,
    jobs: int | None = None,
    scheduler: str | None = None,
    progress: Callable[[int, int], None] | None = None,
    config: str | None = None,
) -> SweepResult:
    """Run every case and return the records.

    Args:
        cases: plain dicts, ``{"workload": "stack", "layers": ..., "batch": ..., "dim": ..., "dtype": ...,
            "seed": ..., "init": ...}`` or ``{"workload": "pkg.mod:workload", "dtype": ..., "seed": ...}``.
        backends, reference, rtol, atol, strict: as for ``crosscheck.run`` (names or import strings).
        jax_platform, jax_precision, jax_deterministic: where the JAX side runs, its matmul precision
            and XLA's deterministic GPU ops (``Execution``).
        torch_device, torch_matmul_tf32, torch_cudnn_tf32, torch_deterministic: where the PyTorch side
            runs, its TF32 switches and its deterministic mode (``Execution``).
        timeout: seconds per case; a case past it is recorded as ``timeout``.
        jobs: worker processes on this machine (default: the CPUs this process may use); 0 runs every
            case in this process, without isolation.
        scheduler: the address of a Dask distributed scheduler; the cases run there instead.
        progress: called as ``progress(done, total)``.

    Raises:
        ValueError, TypeError: bad options (the message says what was expected and found).
    """
    if jobs is None:
        jobs = cpu_count()
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 0:
        raise ValueError(f"`jobs` must be a non-negative integer, found {jobs!r}.")
    if timeout is not None and not timeout > 0:
        raise ValueError(f"`timeout` must be a positive number of seconds, found {timeout!r}.")
    placement = placement_keywords(locals())  # the keywords above
    options = {"backends": backends, "reference": reference, "rtol": rtol, "atol": atol, "strict": strict}
    options.update(placement)
    tasks = make_tasks(cases, options, timeout=timeout)
    records: list[CaseRecord] = []

    def done(record: CaseRecord) -> None:
        records.append(record)
        if progress is not None:
            progress(len(records), len(tasks))

    engine: dict[str, Any] = {}
    stopped: list[str] = []
    try:
        with _interrupts(stopped) as interrupts:
            _run_engine(tasks, done, engine, jobs=jobs, scheduler=scheduler, interrupts=interrupts)
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: the records so far
        stopped.append("SIGINT")
    records.sort(key=lambda r: r["index"])
    interrupted = stopped[0] if stopped else None
    return SweepResult(records, {**options, "timeout": timeout}, engine, config, interrupted, len(tasks))


def _run_engine(
    tasks: list[Task],
    done: Done,
    engine: dict[str, Any],
    *,
    jobs: int,
    scheduler: str | None,
    interrupts: Interrupts,
) -> None:
    """Run the tasks where the options say, and record how in ``engine``."""
    if scheduler is not None:
        engine.update(kind="dask", scheduler=scheduler)
        run_dask(tasks, done, scheduler=scheduler)
    elif jobs == 0:
        engine.update(kind="in-process")
        run_in_process(tasks, done, interrupts=interrupts)
    else:
        engine.update(kind="processes", jobs=min(jobs, cpu_count()))
        if jobs > cpu_count():  # more workers than CPUs only slows every case down
            engine["jobs_asked"] = jobs
        run_processes(tasks, done, jobs=max(1, min(engine["jobs"], len(tasks))))


@contextlib.contextmanager
def _interrupts(stopped: list[str]) -> Iterator[Interrupts]:
    """The sweep's Ctrl-C policy: Ctrl-C and SIGTERM stop the sweep, each raises ``Interrupted`` (the
    user's, never a backend's) and its name goes to ``stopped``. Only in the main thread (elsewhere no
    signal arrives: the policy is never pressed)."""
    interrupts = Interrupts()
    if threading.current_thread() is not threading.main_thread():
        yield interrupts
        return

    def handler(signum: int, frame: Any) -> None:
        stopped.append(signal.Signals(signum).name)
        interrupts.press()
        raise Interrupted

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield interrupts
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def check_specs(cases: Sequence[dict[str, Any]], backends: Sequence[str] | None, reference: str) -> None:
    """Fail before any work on a backend or workload name that cannot mean anything (a typo).

    Raises:
        ValueError: an unknown backend name, or a workload this crosscheck cannot run.
    """
    from crosscheck._backends import BUILTINS, plugin_entry_points

    plugins = plugin_entry_points()
    for spec in [*(backends or []), reference]:
        if spec not in BUILTINS and ":" not in spec and spec not in plugins:
            known = ", ".join(list(BUILTINS) + sorted(plugins))
            raise ValueError(
                f"unknown backend `{spec}`: expected one of {known}, or an import string "
                "`package.module:attribute`."
            )
    workloads = sorted({c.get("workload", STACK) for c in cases} - {STACK})
    if not workloads:
        return
    try:
        from crosscheck._workloads.registry import available_workloads
    except ImportError:
        raise ValueError(
            f"workload `{workloads[0]}`: this crosscheck runs only the built-in `stack` workload."
        ) from None
    named = available_workloads()
    for spec in workloads:
        if ":" not in spec and spec not in named:
            raise ValueError(
                f"unknown workload `{spec}`: expected one of {', '.join(named)}, or an import string "
                "`package.module:attribute`."
            )
