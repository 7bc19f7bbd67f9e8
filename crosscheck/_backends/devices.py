"""The device each framework's side is placed on for the call running now, as that framework's folder
sets it (``backends/<name>/state.placed``) and its side's own code reads it (a port's PyTorch side puts
its tensors there): one context variable, so that a call in one thread never sees another's.

Only a device the run's placement chose is here (``--torch-device cuda``); None leaves the side where
its own code puts it (a port's module where it lives).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Mapping

_PLACED: contextvars.ContextVar[Mapping[str, str] | None] = contextvars.ContextVar(
    "placed_devices", default=None
)


@contextlib.contextmanager
def placing(framework: str, device: str) -> Iterator[None]:
    """``framework``'s side on ``device`` (``"cuda"``, ``"cpu"``) while in effect, in this context."""
    token = _PLACED.set({**(_PLACED.get() or {}), framework: device})
    try:
        yield
    finally:
        _PLACED.reset(token)


def placed_device(framework: str) -> str | None:
    """The device the run placed ``framework``'s side on for this call, None where it chose none."""
    return (_PLACED.get() or {}).get(framework)
