"""JAX's settings a backend may change and the next backend would inherit: read before every guarded
call and restored after it (``crosscheck._engine.call``), while JAX is imported; and the run's
placement of the JAX side (``placed``), in effect inside each call."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Any

from crosscheck._backends.placement import Placement

#: The settings as they are before anything changed them (a backend may import JAX first).
DEFAULTS: dict[str, Any] = {
    "jax matmul precision": None,
    "jax x64": os.environ.get("JAX_ENABLE_X64", "").lower() in ("1", "true", "yes"),
}
_OPTIONS = {"jax matmul precision": "jax_default_matmul_precision", "jax x64": "jax_enable_x64"}


def read() -> dict[str, Any]:
    """The settings now (none while JAX is only partly imported)."""
    jax = sys.modules.get("jax")
    if jax is None or not hasattr(jax, "config"):
        return {}
    return {
        "jax matmul precision": jax.config.jax_default_matmul_precision,
        "jax x64": bool(jax.config.jax_enable_x64),
    }


def write(key: str, value: Any) -> None:
    """Set the setting ``key`` (one of ``DEFAULTS``) to ``value``."""
    sys.modules["jax"].config.update(_OPTIONS[key], value)


@contextlib.contextmanager
def placed(placement: Placement) -> Iterator[None]:
    """The run's placement of the JAX side (``Execution.jax_platform``, ``jax_precision``) in effect for
    one call, in the calling thread: ``jax.default_device`` on the host CPU for platform ``"cpu"``,
    ``jax.default_matmul_precision`` for precision ``"high"`` or ``"highest"``; ``"default"`` leaves JAX
    as it is.

    Both are JAX's own scoped settings, gone when the call returns (so the guarded call, which reads the
    settings outside this context, never notes them as the backend's change). A setting already scoped
    around the call (a classification re-run at ``highest``) is kept: the run's choice is the default
    it refines. Without JAX installed there is nothing to set.
    """
    platform, precision = placement.value("platform"), placement.value("precision")
    jax = _jax() if not placement.left_alone else None
    with contextlib.ExitStack() as stack:
        if jax is not None and platform == "cpu" and jax.config.jax_default_device is None:
            stack.enter_context(jax.default_device(_cpu(jax)))
        if jax is not None and precision != "default" and jax.config.jax_default_matmul_precision is None:
            stack.enter_context(jax.default_matmul_precision(precision))
        yield


def _cpu(jax: Any) -> Any:
    """JAX's first CPU device; ``RuntimeError`` in words where this process has none."""
    try:
        return jax.devices("cpu")[0]
    except RuntimeError as exc:
        platforms = os.environ.get("JAX_PLATFORMS", "")
        raise RuntimeError(
            f"`jax_platform` cpu: JAX has no CPU device in this process (JAX_PLATFORMS={platforms!r}); "
            "leave JAX_PLATFORMS unset, or include cpu in it"
        ) from exc


def _jax() -> Any:
    """JAX, imported now if it is installed (a setting asked for applies from a backend's first call)."""
    try:
        import jax
    except ImportError:
        return None
    return jax
