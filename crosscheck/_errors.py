"""Errors as one line, and the user's Ctrl-C told apart from a ``KeyboardInterrupt`` a backend raises.

At the bottom of the layers: the engine's guarded call, the registry's loaders and a workload's own
checks of user code all describe failures the same way.
"""

from __future__ import annotations

import threading

#: Set by the engine's SIGINT handler: a KeyboardInterrupt raised now is the user's, not a backend's.
USER_INTERRUPT = threading.Event()


class Interrupted(KeyboardInterrupt):
    """The user pressed Ctrl-C: the run stops and reports what finished."""


def reraise_user_interrupt(exc: BaseException) -> None:
    """Raise ``Interrupted`` when ``exc`` comes from the user's Ctrl-C; else return."""
    if isinstance(exc, KeyboardInterrupt) and USER_INTERRUPT.is_set():
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
