"""Errors as one line, and the user's Ctrl-C told apart from a ``KeyboardInterrupt`` a backend raises.

At the bottom of the layers: the engine's guarded call, the registry's loaders and a workload's own
checks of user code all describe failures the same way.
"""

from __future__ import annotations

import threading


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


def describe(exc: BaseException) -> str:
    """One line for an exception: ``Type: message``, with what ``SystemExit`` and ``KeyboardInterrupt``
    mean when a backend raises them."""
    text = one_line(f"{type(exc).__name__}: {exc}").removesuffix(":")
    if isinstance(exc, SystemExit):
        return f"{text} (sys.exit was called inside the backend)"
    if isinstance(exc, KeyboardInterrupt):
        return f"{text} (raised inside the backend, not a Ctrl-C from the user)"
    return text


def one_line(text: str, limit: int = 2000) -> str:
    """Whitespace folded, control characters dropped, cut at ``limit``: safe for a terminal line."""
    folded = " ".join("".join(c if c.isprintable() or c.isspace() else " " for c in text).split())
    return folded if len(folded) <= limit else folded[: limit - 3] + "..."
