"""JAX's settings a backend may change and the next backend would inherit: read before every guarded
call and restored after it (``crosscheck._engine.call``), while JAX is imported; and the run's
placement of the JAX side (``placed``), in effect inside each call."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator, Sequence
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


#: JAX's allocator settings a user may give (``XLA_PYTHON_CLIENT_...``): one given is theirs, kept.
ALLOCATOR = ("XLA_PYTHON_CLIENT_PREALLOCATE", "XLA_PYTHON_CLIENT_MEM_FRACTION", "XLA_PYTHON_CLIENT_ALLOCATOR")
#: What crosscheck set of JAX's allocator in this process, in words ("": nothing).
SHARED: list[str] = []


#: XLA's flag for GPU operations that sum in one order every call (its scatter-adds without atomics).
DETERMINISTIC_OPS = "--xla_gpu_deterministic_ops=true"


def environ(placement: Sequence[Placement]) -> dict[str, str]:
    """The environment a process that runs the JAX side must start with, given every side's placement
    (``{}``: as it is): ``XLA_FLAGS`` with XLA's deterministic GPU ops added where ``jax_deterministic`` is
    on and this environment's flags lack them (XLA reads them once, when JAX first uses a device)."""
    own = next((r for r in placement if r.framework == "jax"), None)
    flags = os.environ.get("XLA_FLAGS", "")
    if own is None or own.value("deterministic") != "on" or DETERMINISTIC_OPS in flags.split():
        return {}
    return {"XLA_FLAGS": f"{flags} {DETERMINISTIC_OPS}".strip()}


def deterministic_ops() -> bool:
    """Whether this process's XLA flags ask for XLA's deterministic GPU ops."""
    return DETERMINISTIC_OPS in os.environ.get("XLA_FLAGS", "").split()


def before(placement: Sequence[Placement]) -> str:
    """What JAX needs set before it first uses a device, given every side's placement, in words ("":
    nothing): XLA's deterministic GPU ops where asked (``environ``: set in this environment where JAX is
    not imported yet; JAX imported already, it may have read its flags, and the check is refused in one
    line), and JAX's allocator (``allocator``)."""
    wanted = environ(placement)
    if wanted and "jax" in sys.modules:
        raise ValueError(
            f"`jax_deterministic` on: JAX is imported in this process already and XLA reads its flags once, "
            f"when JAX first uses a device; set XLA_FLAGS={DETERMINISTIC_OPS} in the environment before "
            "starting (a contained check's worker is started with it)"
        )
    os.environ.update(wanted)
    asked = any(r.framework == "jax" and r.value("deterministic") == "on" for r in placement)
    said = [f"XLA's deterministic GPU ops on (XLA_FLAGS {DETERMINISTIC_OPS})"] if asked else []
    shared = allocator(placement)
    return "; ".join(said + ([shared] if shared else []))


def allocator(placement: Sequence[Placement]) -> str:
    """JAX's allocator, set before it first uses a device, given every side's placement, in words ("":
    nothing): where another side is placed on an accelerator by name (``--torch-device cuda``) and JAX's
    is not on the host CPU, both share one card, and JAX's default takes 75 % of its memory at its first
    use: its preallocation is turned off (``XLA_PYTHON_CLIENT_PREALLOCATE=false``), so that the other
    side fits, unless the user set JAX's allocator. JAX reads it when it first uses a device: set before
    that, in a worker process or before JAX was imported; said either way."""
    own = next((r for r in placement if r.framework == "jax"), None)
    shared = any(r.off_host for r in placement if r.framework != "jax")
    if not shared or (own is not None and own.value("platform") == "cpu"):
        return ""
    given = [f"{k}={os.environ[k]}" for k in ALLOCATOR if k in os.environ]
    if given:
        return f"JAX's allocator as given ({', '.join(given)}), beside another side on the same card"
    os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
    late = (
        " (JAX was imported before the check: if it has used the card already, it holds its memory; set it "
        "in the environment before starting)"
        if "jax" in sys.modules
        else ""
    )
    said = (
        "JAX's preallocation turned off (XLA_PYTHON_CLIENT_PREALLOCATE=false): both sides share one card, "
        f"and JAX would take 75 % of its memory at its first use{late}"
    )
    SHARED[:] = [said]
    return said


def on_card(placement: Placement) -> bool:
    """Whether the JAX side computes on the card another side is placed on (``plan.check_cards``): where
    JAX puts it, unless placed on the host CPU (the same card, as ``before`` sets the allocator for)."""
    return placement.value("platform") != "cpu"


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
