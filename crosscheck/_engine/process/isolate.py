"""Isolation (``--isolate``): a backend in its own worker process, so that nothing it does ends the run.

A worker is a fresh Python (``sys.executable``, this ``sys.path``) that rebuilds the backend from its
spec (a name or an import string, with the workload's spec: a name, an import string, or plain data such
as a ``Stack``'s knobs), then serves calls: the parent sends a
method's name and its arrays, the worker calls the backend through the same guarded call as in process
(``guarded``: its exceptions, writes to its inputs, framework state and what it returns) and sends back
the value and the outcome. Whatever the backend does to its process (``os._exit``, a segfault, an
abort, a hang past the timeout) is that backend's failure record; the parent stops the worker.

Nothing crosses the pipe as a pickle: a message is a JSON header (each array's dtype, numbers only, and
shape) and each array's bytes (``isolate_worker.send``, ``receive``; a worker runs code from elsewhere:
its replies are data, never code).
An object backend cannot be sent (only its spec can), so it runs in process, with a note saying so.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

from crosscheck._backends import ORACLE, Placement, as_options
from crosscheck._engine.call import BackendFailure, Outcome
from crosscheck._engine.process.isolate_worker import BOOT, receive, send
from crosscheck._errors import Interrupts, describe, reraise_user_interrupt
from crosscheck._report.report import BackendResult
from crosscheck._types import Parsed

if TYPE_CHECKING:
    from multiprocessing.connection import Connection

    from crosscheck._backends.protocol import BackendSpec
    from crosscheck._engine.plan import Plan
    from crosscheck._workloads.protocol import WorkloadSpec

#: Whether worker processes can be started here (a socket is passed to the child by file descriptor).
POSIX = os.name == "posix"
#: Seconds a worker may take to start and load its backend (imports of JAX or PyTorch included).
LOAD_SECONDS = 300.0
#: Seconds a worker is given to exit on its own when told to close, before it is killed.
CLOSE_SECONDS = 2.0


class Worker:
    """One worker process for one backend spec, started at once (it loads while the parent works);
    ``placement``: the run's (``Execution.placement``), in effect there while it loads and in each call;
    it crosses as ``settings``, each setting by the name a user gives it (``as_options``)."""

    def __init__(self, workload: WorkloadSpec, spec: str, placement: Sequence[Placement] = ()) -> None:
        self.spec, self.settings = spec, as_options(placement)
        self.stopped: str | None = None  # why it no longer serves calls
        self.conn, self.process, failed = spawn(BOOT)
        if failed:
            self.stop(failed)
            return
        send(self.conn, {"op": "load", "workload": workload, "backend": spec, "settings": self.settings})

    def request(self, message: dict[str, Any] | None, timeout: float | None) -> dict[str, Any]:
        """Send ``message`` (None: only wait for the pending reply) and return the reply.

        Raises:
            BackendFailure: the worker died, or did not answer within ``timeout`` (it is stopped).
        """
        if self.stopped:
            raise BackendFailure(f"its worker process had stopped earlier: {self.stopped}")
        try:
            if message is not None:
                send(self.conn, message)
            if not self.conn.poll(timeout):
                self.stop(
                    f"did not finish within {timeout:g} s (the timeout); its worker process was stopped"
                )
                raise BackendFailure(self.stopped)
            return receive(self.conn)
        except (EOFError, OSError):
            self.stop(self._death())
            raise BackendFailure(self.stopped) from None

    def _death(self) -> str:
        return death(self.process, "the backend")

    def stop(self, why: str) -> None:
        """Kill the worker (it may be stuck in the backend) and remember why."""
        self.stopped = self.stopped or why
        if self.process is not None:
            with contextlib.suppress(OSError):
                self.process.kill()
            self.process.wait()
        self.conn.close()

    def close(self) -> None:
        """Ask the worker to exit; kill it when it does not within ``CLOSE_SECONDS``."""
        if self.stopped is None and self.process is not None:
            with contextlib.suppress(OSError, ValueError):
                send(self.conn, {"op": "close"})
            try:
                self.process.wait(timeout=CLOSE_SECONDS)
            except subprocess.TimeoutExpired:
                pass
            self.stop("closed")


def spawn(
    boot: str, *, session: bool = False, env: Mapping[str, str] | None = None
) -> tuple[Connection, subprocess.Popen[bytes] | None, str]:
    """A worker process started as ``python -c boot FD SYS_PATH``: ``(connection, process, "")``, or
    ``(connection, None, why)`` when it could not start. ``session``: in a session of its own, so that a
    Ctrl-C at the terminal reaches only this process (which forwards it); ``env``: variables it starts
    with besides this process's environment (what a framework reads once, when it starts: XLA's flags)."""
    from multiprocessing.connection import Connection

    ours, theirs = socket.socketpair()
    conn = Connection(ours.detach())
    with theirs:
        try:
            process = subprocess.Popen(
                [sys.executable, "-c", boot, str(theirs.fileno()), json.dumps(sys.path)],
                pass_fds=[theirs.fileno()],
                stdin=subprocess.DEVNULL,
                start_new_session=session,
                env={**os.environ, **env} if env else None,
            )
        except OSError as exc:  # no interpreter to start, too many processes, ...
            return conn, None, f"its worker process could not start: {exc.strerror or exc}"
    return conn, process, ""


def death(process: subprocess.Popen[bytes] | None, inside: str) -> str:
    """Why a worker process stopped answering, with whose code (``inside``) is to blame."""
    if process is None:
        return "its worker process never started"
    try:
        code = process.wait(timeout=CLOSE_SECONDS)
    except subprocess.TimeoutExpired:
        return "its worker process stopped answering"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"its worker process was killed by {name} (a crash or an abort in {inside})"
    return f"its worker process died with exit status {code} (os._exit or a crash in {inside})"


def start_workers(plan: Plan) -> dict[str | int, Worker]:
    """A worker for each backend of ``plan`` that runs isolated (``plan.isolate``), by position:
    ``"reference"``, or a candidate's index. Started at once, so they load side by side."""
    if not plan.isolate:
        return {}
    keyed: list[tuple[str | int, BackendSpec]] = [("reference", plan.reference), *enumerate(plan.candidates)]
    return {  # a spec sent to a worker is a string: ``in_process_reason`` keeps an object here
        key: Worker(plan.workload_spec, cast(str, spec), plan.placement)
        for key, spec in keyed
        if not in_process_reason(plan, spec, reference=key == "reference")
    }


def in_process_reason(plan: Plan, spec: BackendSpec, *, reference: bool) -> str:
    """Why a backend runs in this process ("" when it runs in a worker, or when ``plan.isolate`` is
    False). With ``"auto"`` only code from elsewhere (an import string, a plugin) goes to a worker, and
    a backend that stays here needs no reason."""
    if plan.isolate is False:
        return ""
    if not POSIX:
        return "in this process: worker processes need a POSIX system"
    if plan.isolate == "auto":
        return "" if foreign(spec) and plan.workload_spec is not None else "in this process"
    if reference and spec == ORACLE:
        return "in this process: the reference is crosscheck's own oracle"
    if not isinstance(spec, str):
        return "in this process: an object cannot be sent to a worker process (give its import string)"
    if plan.workload_spec is None:
        return (
            "in this process: a workload given as an object cannot be rebuilt in a worker process "
            "(give its import string)"
        )
    return ""


def foreign(spec: BackendSpec) -> bool:
    """Whether ``spec`` names code from elsewhere: an import string or an installed plugin's name (not
    a built-in backend, nor a workload's implementation, nor an object the caller holds)."""
    from crosscheck._backends import BUILTINS, plugin_entry_points

    if not isinstance(spec, str) or spec in BUILTINS:
        return False
    return ":" in spec or spec in plugin_entry_points()


def load_isolated(worker: Worker, *, required: bool) -> tuple[Any, BackendResult]:
    """``(backend or None, its record)`` from ``worker``, as ``crosscheck._engine.load.load`` gives them.

    Raises:
        ValueError: the spec cannot mean anything (an unknown name, a bad import string).
    """
    try:
        reply = worker.request(None, LOAD_SECONDS)
    except BackendFailure as exc:
        return None, BackendResult(
            name=worker.spec, status="failed", error=f"failed to load: {exc}", required=required
        )
    if reply["status"] == "usage":
        worker.close()
        raise ValueError(reply["error"])
    if reply["status"] != "loaded":
        worker.close()
        return None, BackendResult(
            name=worker.spec, status=reply["status"], error=reply["error"], required=required
        )
    backend = IsolatedBackend(worker, reply)
    notes = {"spec": worker.spec, "isolated": "in its own worker process"}
    result = BackendResult(
        name=backend.name, status="pending", required=required, info=reply["info"], notes=notes
    )
    return backend, result


class IsolatedBackend:
    """The parent's stand-in for a backend in a worker: its name, info, ``output_dtype`` and the methods
    it has (``METHODS``, ``CONTEXTS``), each call sent to the worker (see ``RemoteMethod``)."""

    def __init__(self, worker: Worker, description: dict[str, Any]) -> None:
        self.worker = worker
        self.name = str(description["name"])
        self._info = dict(description["info"])
        self._methods = set(description["methods"])
        self._contexts = set(description["contexts"])
        self._dtype = description.get("output_dtype")
        self.active: list[str] = []  # contexts entered (the worker enters them around each call)

    def info(self) -> dict[str, str]:
        return dict(self._info)

    @property
    def output_dtype(self) -> str:
        if isinstance(self._dtype, dict):  # the backend's own attribute raised
            raise BackendFailure(self._dtype["error"])
        if self._dtype is None:
            raise AttributeError("output_dtype")
        return self._dtype

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if name.startswith("_"):
            raise AttributeError(name)
        if name in self._methods:
            return RemoteMethod(self, name)
        if name in self._contexts:
            return lambda: self._entered(name)
        raise AttributeError(name)

    @contextlib.contextmanager
    def _entered(self, context: str) -> Iterator[None]:
        self.active.append(context)
        try:
            yield
        finally:
            self.active.remove(context)


class RemoteMethod:
    """A backend method run in the worker: ``remote(...)`` gives an ``Outcome`` (the driver's ``Caller``
    calls it); calling it directly raises ``BackendFailure`` when the call failed."""

    def __init__(self, backend: IsolatedBackend, method: str) -> None:
        self.backend, self.method = backend, method

    def remote(
        self,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        *,
        names: list[str],
        timeout: float | None,
        interrupts: Interrupts | None = None,
    ) -> Outcome:
        message = {
            "op": "call",
            "method": self.method,
            "args": list(args),
            "kwargs": {k: v for k, v in kwargs.items() if not callable(v)},  # progress stays here
            "names": names,
            "contexts": list(self.backend.active),
            "settings": self.backend.worker.settings,
        }
        start = time.perf_counter()
        try:
            reply = self.backend.worker.request(message, timeout)
        except BackendFailure as exc:
            return Outcome(None, str(exc), time.perf_counter() - start)
        except BaseException as exc:  # an array that cannot be sent, ...: this call's failure
            reraise_user_interrupt(exc, interrupts)
            error = f"could not be sent to its worker process: {describe(exc)}"
            return Outcome(None, error, time.perf_counter() - start)
        return Outcome(reply["value"], reply["error"], float(reply["seconds"]), dict(reply["notes"]))

    def __call__(self, *args: Any, **kwargs: Any) -> Parsed:
        out = self.remote(args, kwargs, names=[], timeout=None)
        if out.error is not None:
            raise BackendFailure(out.error)
        return out.value
