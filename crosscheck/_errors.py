"""Errors as one line, and the user's Ctrl-C told apart from a ``KeyboardInterrupt`` a backend raises.

At the bottom of the layers: the engine's guarded call, the registry's loaders and a workload's own
checks of user code all describe failures the same way.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

T = TypeVar("T")


class Interrupted(KeyboardInterrupt):
    """The user pressed Ctrl-C: the run stops and reports what finished."""


class Interrupts:
    """The Ctrl-C policy of a run: whose a ``KeyboardInterrupt`` is, handed to each guarded call.

    The engine makes one for a run (``crosscheck._engine.call.user_interrupts``, a sweep its own) and
    its signal handler calls ``press``, then raises ``Interrupted``. Once pressed, every
    ``KeyboardInterrupt`` is the user's: the run stops and reports what finished. Before, one is the
    backend's own, its failure like a ``sys.exit``. Code with no engine above it (a script's
    ``load_backend``, the inspect tool) has no policy: there only an ``Interrupted``, which nothing
    but a handler raises, is the user's.
    """

    def __init__(self) -> None:
        self._pressed = threading.Event()  # set from the signal handler, read by any thread

    def press(self) -> None:
        """The user pressed Ctrl-C (or the sweep got SIGTERM)."""
        self._pressed.set()

    @property
    def pressed(self) -> bool:
        return self._pressed.is_set()


def reraise_user_interrupt(exc: BaseException, interrupts: Interrupts | None = None) -> None:
    """Raise ``Interrupted`` when ``exc`` is the user's Ctrl-C under the policy ``interrupts`` (None:
    no engine above); else return, and ``exc`` is the failure of the code that raised it."""
    pressed = interrupts is not None and interrupts.pressed
    if isinstance(exc, Interrupted) or (isinstance(exc, KeyboardInterrupt) and pressed):
        raise Interrupted from exc


def describe(exc: BaseException, inside: str = "the backend") -> str:
    """One line for an exception: ``Type: message``, with what ``SystemExit`` and ``KeyboardInterrupt``
    mean when the code ``inside`` (a backend, a workload's ``generate``) raises them."""
    text = one_line(f"{type(exc).__name__}: {exc}").removesuffix(":")
    if isinstance(exc, SystemExit):
        return f"{text} (sys.exit was called inside {inside})"
    if isinstance(exc, KeyboardInterrupt):
        return f"{text} (raised inside {inside}, not a Ctrl-C from the user)"
    return text


class UserCodeFailed(ValueError):
    """A user callable that runs before any backend exists (a workload's ``generate``, a port's
    ``inputs``, its PyTorch module's ``state_dict()``, its Flax module's ``setup``) failed: a bad
    workload, said in one line that names the callable (exit 2 on the command line)."""


class DetailedError(ValueError):
    """A bad input said in one line (``str``; a ``Refused``: one line per problem), with ``details`` the
    command line prints before it on standard output (a port's mapping table: the rows a refused
    mapping needs fixed, first)."""

    def __init__(self, message: str, details: str) -> None:
        super().__init__(message)
        self.details = details


class Refused(DetailedError):
    """Every problem of one declaration, found together and said together (a port whose mapping and
    listed intermediates are both wrong): a head line naming it (``where``) and the count, then one
    line per problem (``problems``), each a finding of its own; ``details`` as for ``DetailedError``
    (the command line prints the message line by line, each as text)."""

    def __init__(self, where: str, problems: Sequence[str], details: str = "", *, hint: str = "") -> None:
        self.problems = tuple(one_line(p) for p in problems)
        said = f" ({hint})" if hint else ""
        head = f"{where}: {len(self.problems)} problems, each to fix before it is checked{said}:"
        super().__init__("\n".join([head, *(f"  - {p}" for p in self.problems)]), details)


#: The user callables running now (``user_call``), outermost first, each with when it started: what a
#: contained run's worker (``crosscheck._engine.process.contain_worker``) names when one runs past its
#: timeout.
RUNNING: list[tuple[str, float]] = []


def user_call(where: str, what: str, fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)``, user code that runs before any backend exists, guarded like a backend's call.

    Whatever it raises, ``BaseException`` included (its ``sys.exit`` or ``KeyboardInterrupt`` is a bad
    workload, not the end of the run nor a traceback), is a ``UserCodeFailed`` of one line: ``where``
    (``port `p```), ``what`` (the callable as a message names it, ``the PyTorch module's
    `state_dict()```), ``failed:`` and ``describe(exc)``. One it raises already (a nested user call)
    passes unchanged. The user's own Ctrl-C propagates (``Interrupted``): while ``fn`` runs in the main
    thread under Python's default SIGINT handler, a Ctrl-C raises ``Interrupted``, so it is told apart
    from a ``KeyboardInterrupt`` that ``fn`` raises itself.
    """
    running = (f"{where}: {what}", time.monotonic())
    RUNNING.append(running)
    try:
        with _ctrl_c_interrupts():
            return fn(*args)
    except UserCodeFailed:
        raise
    except BaseException as exc:
        reraise_user_interrupt(exc)
        raise UserCodeFailed(f"{where}: {what} failed: {describe(exc, what)}") from exc
    finally:
        RUNNING.remove(running)


@contextlib.contextmanager
def _ctrl_c_interrupts() -> Iterator[None]:
    """A Ctrl-C raises ``Interrupted`` while inside (where Python's default handler is installed, in the
    main thread; an engine's own handler, ``user_interrupts``, does so already)."""
    main = threading.current_thread() is threading.main_thread()
    if not main or signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        raise Interrupted

    signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def one_line(text: str, limit: int = 2000) -> str:
    """Whitespace folded, control characters dropped, cut at ``limit``: safe for a terminal line."""
    folded = " ".join("".join(c if c.isprintable() or c.isspace() else " " for c in text).split())
    return folded if len(folded) <= limit else folded[: limit - 3] + "..."
