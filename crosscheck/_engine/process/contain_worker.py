"""The worker process of a contained run (``crosscheck._engine.process.contain``): it runs one job (a
check's ``execute:job`` or a replay's ``replay:job``, named by the parent, on the parent's plain-data
record) and sends back what the job returns, as data (``crosscheck._report.wire``), with progress on the
way.

Started as ``python -c BOOT FD SYS_PATH``, in a session of its own (the parent forwards a Ctrl-C). With
a timeout, a thread says "alive" every ``HEARTBEAT`` seconds, and says "stuck" (and then nothing) when
a user callable (``crosscheck._errors.RUNNING``) has run longer than the timeout; a worker stuck while
holding the GIL says nothing at all, which the parent notices just the same.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from crosscheck._engine.process.isolate_worker import _die_with_parent, receive
from crosscheck._engine.process.isolate_worker import send as send_message
from crosscheck._errors import RUNNING, DetailedError, describe, one_line
from crosscheck._report.wire import to_wire

BOOT = (
    "import json, sys; sys.path[:] = json.loads(sys.argv[2]); "
    "from crosscheck._engine.process.contain_worker import main; main(int(sys.argv[1]))"
)
#: Seconds between two "alive" messages (with a timeout).
HEARTBEAT = 0.5
#: Seconds between two progress messages of one task (its first and last are always sent).
PROGRESS_EVERY = 0.1


def main(fd: int) -> None:
    """Run the job the parent sends on the connection ``fd``, then send its result and exit."""
    from multiprocessing.connection import Connection

    _die_with_parent()
    conn = Connection(fd)
    request = receive(conn)
    lock = threading.Lock()

    def send(message: dict[str, Any]) -> None:
        with lock:
            send_message(conn, message)

    beat = Heartbeat(send, request["timeout"])
    reply = _reply(request, send)
    beat.stop()
    for stream in (sys.stdout, sys.stderr):  # what the job printed, written before its result is sent
        with contextlib.suppress(Exception):
            stream.flush()
    try:
        send(reply)
    except (TypeError, ValueError) as exc:  # an array that cannot be sent, ...
        send({"op": "error", "error": f"its report could not be sent: {describe(exc)}"})


def _reply(request: dict[str, Any], send: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    """The job's result (``op`` result), its usage error (``op`` usage: exit 2 in the parent) or what
    else it raised (``op`` error)."""
    try:
        job = _job(request["job"])
        announce = lambda value: send({"op": "announce", "value": value})  # noqa: E731
        value = job(request["request"], progress=_progress(send), announce=announce)
        return {"op": "result", "value": to_wire(value)}
    except (ValueError, TypeError) as exc:
        cause: BaseException | None = exc
        while cause is not None and not isinstance(cause, DetailedError):
            cause = cause.__cause__
        details = cause.details if isinstance(cause, DetailedError) else None
        kind = "TypeError" if isinstance(exc, TypeError) else "ValueError"
        return {"op": "usage", "kind": kind, "error": str(exc), "details": details}
    except BaseException as exc:
        return {"op": "error", "error": describe(exc, "the workload's code")}


#: Where a contained run's job may live: crosscheck's own verbs (a check's ``execute:job``, a replay's
#: ``replay:job``), imported here by name across the process boundary, never code from elsewhere.
JOB_HOMES = ("crosscheck._engine.", "crosscheck._replay.")


def _job(name: str) -> Callable[..., Any]:
    """The job ``module:function``, one of crosscheck's own verbs (``JOB_HOMES``)."""
    module, _, attribute = name.partition(":")
    if not module.startswith(JOB_HOMES):
        raise RuntimeError(f"a contained run's job must be crosscheck's own, found `{one_line(name)}`")
    job: Callable[..., Any] = getattr(importlib.import_module(module), attribute)
    return job


def _progress(send: Callable[[dict[str, Any]], None]) -> Callable[[str, int, int], None]:
    """``progress(description, done, total)`` sent to the parent, at most every ``PROGRESS_EVERY``
    seconds per description (its first and last updates always)."""
    last: dict[str, float] = {}

    def progress(description: str, done: int, total: int) -> None:
        now = time.monotonic()
        if description in last and done < total and now - last[description] < PROGRESS_EVERY:
            return
        last[description] = now
        send({"op": "progress", "description": description, "done": int(done), "total": int(total)})

    return progress


class Heartbeat:
    """With a timeout, a thread that sends "alive" every ``HEARTBEAT`` seconds, and "stuck" (naming the
    user callable) once a user callable has run longer than the timeout; then it stops."""

    def __init__(self, send: Callable[[dict[str, Any]], None], timeout: float | None) -> None:
        self.send, self.timeout = send, timeout
        self.done = threading.Event()
        if timeout is not None:
            threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        assert self.timeout is not None
        self.send({"op": "alive"})  # started: from here on, silence is a hang
        while not self.done.wait(HEARTBEAT):
            now = time.monotonic()
            late = [what for what, started in list(RUNNING) if now - started > self.timeout]
            if late:
                self.send({"op": "stuck", "what": late[-1]})
                return
            self.send({"op": "alive"})

    def stop(self) -> None:
        self.done.set()
