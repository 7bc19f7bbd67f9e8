"""The guarded call: every call into a backend, on every path, goes through ``guarded``.

Modelled on pytest's ``CallInfo.from_call``: whatever the backend does is recorded, never let escape.

- Anything it raises, ``BaseException`` included (a backend's ``sys.exit`` or ``KeyboardInterrupt`` is
  that backend's failure, not the end of the run), is a one-line reason. A real Ctrl-C from the user
  (``user_interrupts`` installed) still propagates, so the run can stop and report what finished.
- Its inputs are compared bit for bit with a private copy taken before the call (``-0.0`` over ``0.0``
  and NaN payloads included) and put back when it wrote to them.
- Framework state it may change (NumPy's error state, JAX's matmul precision and x64 flag, PyTorch's
  default dtype, float32 matmul precision and grad mode) is read before and restored after; what it
  changed is noted, not failed.
- What it returns is converted once (``to_array``): ``None``, something that is not an array, an
  object array are failures with a precise message; a PyTorch tensor that requires grad is detached
  (safe: only the values are compared) and the record says so.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np

from crosscheck._errors import USER_INTERRUPT, Interrupted, describe, reraise_user_interrupt


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What one guarded call gave: ``value`` (None when it failed), ``error`` (one line, or None),
    ``seconds`` and ``notes`` (``converted``, ``state_changed``)."""

    value: Any
    error: str | None
    seconds: float
    notes: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.error is None


@contextlib.contextmanager
def user_interrupts() -> Iterator[None]:
    """Tell the user's Ctrl-C (SIGINT) apart from a ``KeyboardInterrupt`` a backend raises itself.

    Only in the main thread (elsewhere no signal arrives, so every KeyboardInterrupt is a backend's).
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGINT)

    def handler(signum: int, frame: Any) -> None:
        USER_INTERRUPT.set()
        raise Interrupted

    signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        USER_INTERRUPT.clear()


def guarded(fn: Callable[..., Any], args: tuple[Any, ...], *, inputs: Mapping[str, np.ndarray]) -> Outcome:
    """Call ``fn(*args)``; never raises, except for the user's own Ctrl-C (``Interrupted``).

    ``inputs`` are the arrays the backend may see, by name (checked bit for bit and restored).
    """
    names, live = list(inputs), list(inputs.values())
    pristine = [np.array(a, copy=True) for a in live]
    state = framework_state()
    start = time.perf_counter()
    value, error = None, None
    try:
        value = fn(*args)
    except BaseException as exc:
        reraise_user_interrupt(exc)
        error = describe(exc)
    seconds = time.perf_counter() - start
    notes: dict[str, Any] = {}
    changed = restore_state(state)
    if changed:
        notes["state_changed"] = changed
    if _restore(live, pristine) and error is None:
        error = f"modified its inputs ({_either(names)}); backends must not write to them"
    return Outcome(None if error else value, error, seconds, notes)


def _either(names: list[str]) -> str:
    quoted = [f"`{n}`" for n in names]
    return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " or " + quoted[-1]


def _restore(live: list[np.ndarray], pristine: list[np.ndarray]) -> bool:
    """Put every written input back; whether any was written (compared as bits, not values)."""
    modified = False
    for a, p in zip(live, pristine, strict=True):
        if a.shape != p.shape or a.dtype != p.dtype or a.tobytes() != p.tobytes():
            modified = True
            with contextlib.suppress(ValueError, TypeError):
                a[...] = p
    return modified


# -- framework state ------------------------------------------------------------------------------------

#: A framework's settings as they are before anything changed them (a backend may import it first).
_DEFAULTS = {
    "jax matmul precision": None,
    "jax x64": os.environ.get("JAX_ENABLE_X64", "").lower() in ("1", "true", "yes"),
    "torch default dtype": "float32",
    "torch float32 matmul precision": "highest",
    "torch grad mode": True,
}


def framework_state() -> dict[str, Any]:
    """The settings a backend may change and the next backend would inherit."""
    state: dict[str, Any] = {"numpy error state": np.geterr()}
    jax = sys.modules.get("jax")
    if jax is not None and hasattr(jax, "config"):
        state["jax matmul precision"] = jax.config.jax_default_matmul_precision
        state["jax x64"] = bool(jax.config.jax_enable_x64)
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "get_default_dtype"):
        state["torch default dtype"] = str(torch.get_default_dtype()).removeprefix("torch.")
        state["torch float32 matmul precision"] = torch.get_float32_matmul_precision()
        state["torch grad mode"] = torch.is_grad_enabled()
    return state


def restore_state(before: Mapping[str, Any]) -> list[str]:
    """Put back every setting that differs from ``before`` (or from its default); what was changed."""
    after = framework_state()
    changed = [k for k, v in after.items() if v != before.get(k, _DEFAULTS.get(k))]
    for key in changed:
        with contextlib.suppress(Exception):  # restoring must never fail the run
            _SETTERS[key](before.get(key, _DEFAULTS.get(key)))
    return changed


def _set_jax(option: str) -> Callable[[Any], None]:
    return lambda value: sys.modules["jax"].config.update(option, value)


def _set_torch_dtype(name: str) -> None:
    torch = sys.modules["torch"]
    torch.set_default_dtype(getattr(torch, name))


_SETTERS: dict[str, Callable[[Any], Any]] = {
    "numpy error state": lambda value: np.seterr(**value),
    "jax matmul precision": _set_jax("jax_default_matmul_precision"),
    "jax x64": _set_jax("jax_enable_x64"),
    "torch default dtype": _set_torch_dtype,
    "torch float32 matmul precision": lambda v: sys.modules["torch"].set_float32_matmul_precision(v),
    "torch grad mode": lambda v: sys.modules["torch"].set_grad_enabled(v),
}


# -- what came back -------------------------------------------------------------------------------------


def to_array(value: Any, what: str = "") -> tuple[np.ndarray | None, str | None, dict[str, str]]:
    """``(array, error, notes)``: a private NumPy copy of a backend's result, or why there is none."""
    where = f" for {what}" if what else ""
    if value is None:
        return None, f"returned None{where} instead of an array (a missing `return`?)", {}
    notes = {}
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.Tensor):
        if value.requires_grad:
            notes["converted"] = "returned a torch tensor that requires grad: detached (values compared)"
        value = value.detach().cpu().resolve_conj().resolve_neg().numpy()
    try:
        # asarray, then a copy: NumPy 2 warns when it passes `copy=` to an `__array__` without it.
        array = np.asarray(value).copy()
    except BaseException as exc:
        reraise_user_interrupt(exc)
        return None, f"returned something that is not an array{where}: {describe(exc)}", {}
    if not (np.issubdtype(array.dtype, np.number) or array.dtype == bool):
        found = f"{type(value).__name__} of dtype {array.dtype.name}"
        return None, f"returned something that is not an array of numbers{where}: {found}", {}
    return array, None, notes


def to_arrays(value: Any) -> tuple[dict[str, np.ndarray] | None, str | None, dict[str, str]]:
    """A workload backend's ``{parameter: array}``, each converted by ``to_array``."""
    if not isinstance(value, Mapping):
        found = "None (a missing `return`?)" if value is None else type(value).__name__
        return None, f"returned {found}; expected a dict of gradients keyed by parameter name", {}
    out: dict[str, np.ndarray] = {}
    notes: dict[str, str] = {}
    for key, item in value.items():
        array, error, more = to_array(item, f"parameter `{key}`")
        if error or array is None:
            return None, error, {}
        out[str(key)], notes = array, {**notes, **more}
    return out, None, notes
