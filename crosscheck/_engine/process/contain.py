"""A contained run: a whole check (or replay) of a workload from elsewhere (an import string) in one worker
process, so that nothing its code does (``os._exit``, a segfault, a hang past the timeout) ends the run
with nothing said. ``in_worker`` is the one helper both verbs call.

The parent starts a fresh Python (``crosscheck._engine.process.contain_worker``) and sends it a job (a
verb's own, ``module:function``: a check's ``crosscheck._engine.execute:job``, a replay's
``crosscheck._replay.replay:job``) and the job's record as plain data (``Request.to_data``,
``Replay.to_data``); the worker loads the workload, runs the same code as in process, and sends back
what the job returns as data (``crosscheck._report.wire``, never a pickle), with its progress on the way
(and the plan's outlook, for the CLI's notes). The parent builds the report from that data and writes
and prints it as for any run.

When the worker dies, or (with a timeout) says nothing for longer than the timeout plus ``GRACE``
seconds (a hang holding the GIL), or says a user callable has run longer than the timeout, the parent
stops it and ``WorkerStopped`` names why and what it was doing; the caller makes that a failure that
names the workload (exit 1). A Ctrl-C is forwarded to the worker, which stops and reports what finished.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar, cast

from crosscheck._engine.process.contain_worker import BOOT
from crosscheck._engine.process.isolate import CLOSE_SECONDS, POSIX, death, spawn
from crosscheck._engine.process.isolate_worker import receive, send
from crosscheck._errors import DetailedError, one_line
from crosscheck._report.environment import environment
from crosscheck._report.report import Report
from crosscheck._report.wire import from_wire

if TYPE_CHECKING:
    from multiprocessing.connection import Connection

#: Seconds of silence, beyond the timeout, after which a worker is taken to hang (holding the GIL).
GRACE = 2.0
#: Seconds a worker may take to start (Python and crosscheck imported) before it says anything.
START_SECONDS = 120.0
#: Seconds a worker is given, after a Ctrl-C is forwarded, to report what finished.
INTERRUPT_SECONDS = 10.0

T = TypeVar("T")


class WorkerStopped(Exception):
    """The worker of a contained run stopped before it sent its result: ``str`` says why, ``doing``
    what it was doing (its last progress, or "loading"), ``interrupted`` whether the user pressed
    Ctrl-C."""

    def __init__(self, why: str, doing: str, *, interrupted: bool = False) -> None:
        super().__init__(why)
        self.doing, self.interrupted = doing, interrupted


def wanted(spec: Any, isolate: bool | str) -> bool:
    """Whether a run of workload ``spec`` is contained: an import string (code from elsewhere), unless
    ``isolate`` is False (in process, for debugging) or worker processes cannot start here."""
    return isolate is not False and POSIX and isinstance(spec, str) and ":" in spec


def contained(
    job: str,
    request: dict[str, Any],
    *,
    timeout: float | None,
    progress: Callable[[str, int, int], None] | None,
    announce: Callable[[Any], None] | None = None,
    env: Mapping[str, str] | None = None,
) -> object:
    """What ``job(request, progress=..., announce=...)`` returns, run in a worker process (what the job
    announces, plain data, passed on to ``announce`` as it comes; ``env``: variables it starts with).

    Raises:
        ValueError, TypeError: the job's usage error (a ``DetailedError`` keeps its details).
        WorkerStopped: the worker died, hung or was interrupted before it sent its result.
    """
    conn, process, failed = spawn(BOOT, session=True, env=env)
    if failed:
        raise WorkerStopped(failed, "starting")
    watch = _Watch(conn, process, timeout, progress)
    watch.announce = announce
    reply: dict[str, Any] | None = None
    try:
        send(conn, {"job": job, "request": request, "timeout": timeout})
        reply = watch.result()
    finally:
        # A reply (a report or a refusal) is the worker's last word, its output flushed before it
        # (``contain_worker.main``): it is said at once, not after the worker's interpreter exits
        # (PyTorch's and JAX's teardown, 1 to 2 s on a loaded machine).
        watch.close(0.0 if reply is not None else CLOSE_SECONDS)
    if reply["op"] == "result":
        return from_wire(reply["value"])
    if reply["op"] == "usage":
        if reply["details"] is not None:
            raise DetailedError(reply["error"], reply["details"])
        raise (TypeError if reply["kind"] == "TypeError" else ValueError)(reply["error"])
    if watch.interrupted:  # the forwarded Ctrl-C stopped it before it had a report
        raise WorkerStopped("interrupted (Ctrl-C)", watch.doing, interrupted=True)
    raise WorkerStopped(f"it raised {one_line(str(reply['error']))}", watch.doing)


def in_worker(
    job: str,
    data: dict[str, Any],
    *,
    stopped: Callable[[WorkerStopped], T],
    timeout: float | None,
    progress: Callable[[str, int, int], None] | None = None,
    announce: Callable[[Any], None] | None = None,
    env: Mapping[str, str] | None = None,
) -> T:
    """The one helper for contained work (a check, a replay): what ``job`` returns for ``data``, run in a
    worker process (``contained``); a worker that died, hung or was interrupted before it sent it:
    what ``stopped`` makes of why (a failure that names the workload, never a pass).

    Raises:
        ValueError, TypeError: the job's usage error, as ``contained`` raises it.
    """
    try:
        # What the job named by ``job`` returns (a T), rebuilt from data: no type crosses a process.
        found = contained(job, data, timeout=timeout, progress=progress, announce=announce, env=env)
        value = cast(T, found)
    except WorkerStopped as why:
        return stopped(why)
    return value


class _Watch:
    """The parent's end: reads the worker's messages (progress passed on), until its result."""

    def __init__(
        self, conn: Connection, process: subprocess.Popen[bytes] | None, timeout: float | None, progress: Any
    ):
        self.conn, self.process, self.progress = conn, process, progress
        self.silence = None if timeout is None else timeout + GRACE
        self.timeout = timeout
        self.doing = "loading the workload"
        self.interrupted = False
        self.started = False  # it said something: its imports are done
        self.announce: Callable[[Any], None] | None = None

    def result(self) -> dict[str, Any]:
        """The worker's last message (result, usage or error).

        Raises:
            WorkerStopped: as ``contained`` says.
        """
        while True:
            message = self._next()
            op = message["op"]
            if op == "progress":
                self.doing = f"{message['description']} ({message['done']} of {message['total']})"
                if self.progress is not None:
                    self.progress(message["description"], message["done"], message["total"])
            elif op == "announce":
                if self.announce is not None:
                    self.announce(message["value"])
            elif op == "stuck":
                self._stop(f"{message['what']} did not finish within {self.timeout:g} s (the timeout)")
            elif op != "alive":
                return message

    def _next(self) -> dict[str, Any]:
        wait = INTERRUPT_SECONDS if self.interrupted else self.silence
        if wait is not None and not self.started:
            wait = max(wait, START_SECONDS)
        try:
            if not self.conn.poll(wait):
                if self.interrupted:
                    self._stop(f"it did not stop within {INTERRUPT_SECONDS:g} s of the Ctrl-C")
                self._stop(
                    f"its worker process said nothing for {wait:g} s (a hang holding the GIL, past the "
                    f"timeout of {self.timeout:g} s)"
                )
            message: dict[str, Any] = receive(self.conn)
            self.started = True
            return message
        except (EOFError, OSError):
            self._stop(death(self.process, "the workload's code"))
        except KeyboardInterrupt:
            if self.interrupted or self.process is None:  # a second Ctrl-C: stop at once
                self.interrupted = True
                self._stop("interrupted (Ctrl-C)")
            else:
                self.interrupted = True
                with contextlib.suppress(OSError):
                    os.kill(self.process.pid, signal.SIGINT)
            return self._next()
        raise AssertionError("unreachable")

    def _stop(self, why: str) -> None:
        self.close()
        raise WorkerStopped(why, self.doing, interrupted=self.interrupted)

    def close(self, wait: float = 0.0) -> None:
        """Give the worker ``wait`` seconds to exit on its own (it flushes its output), then kill it (it
        may be stuck) and close the connection."""
        if self.process is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=wait)
            with contextlib.suppress(OSError):
                self.process.kill()
            self.process.wait()
        self.conn.close()


def halted(
    spec: str,
    stopped: WorkerStopped,
    *,
    reference: Any,
    placement: dict[str, str] | None = None,
    **case: Any,
) -> Report:
    """The report of a contained run whose worker stopped before it sent its report: it fails, naming
    the workload, why its worker stopped and what it was doing then; nothing was compared
    (``placement``: the run's, each setting by its option's name, recorded as a run records it)."""
    why = f"workload `{spec}`: {stopped} while {stopped.doing}; nothing was compared"
    return Report(
        case={"workload": spec, **case},
        backends={},
        comparisons=[],
        reference=str(reference),
        environment=environment(),
        interrupted=stopped.interrupted,
        halted=one_line(why),
        placement=dict(placement or {}),
    )
