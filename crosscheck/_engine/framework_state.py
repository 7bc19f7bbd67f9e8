"""The framework state a backend call may change, read before the call and restored after it.

NumPy's error state, and each imported framework's as its folder's ``state.py`` reads it (JAX's matmul
precision and x64 flag, PyTorch's default dtype, float32 matmul precision and grad mode): the guarded
call (``call.guarded``) restores what a backend changed and notes it, never fails it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

import numpy as np

from crosscheck._backends import in_use


def framework_state() -> dict[str, Any]:
    """The settings a backend may change and the next backend would inherit: NumPy's error state and
    each imported framework's (its folder's ``state.read()``: JAX's matmul precision and x64 flag,
    PyTorch's default dtype, float32 matmul precision and grad mode)."""
    state: dict[str, Any] = {"numpy error state": np.geterr()}
    for framework in in_use():
        state.update(framework.module("state").read())
    return state


def restore_state(before: Mapping[str, Any]) -> list[str]:
    """Put back every setting that differs from ``before`` (or from its default); what was changed."""
    after = framework_state()
    defaults = {key: value for state in _states() for key, value in state.DEFAULTS.items()}
    changed = [k for k, v in after.items() if v != before.get(k, defaults.get(k))]
    for key in changed:
        with contextlib.suppress(Exception):  # restoring must never fail the run
            _write(key, before.get(key, defaults.get(key)))
    return changed


def _states() -> list[Any]:
    """The ``state`` modules of the imported frameworks (``backends/<name>/state.py``)."""
    return [framework.module("state") for framework in in_use()]


def _write(key: str, value: Any) -> None:
    if key == "numpy error state":
        np.seterr(**value)
        return
    next(state for state in _states() if key in state.DEFAULTS).write(key, value)
