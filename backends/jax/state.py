"""JAX's settings a backend may change and the next backend would inherit: read before every guarded
call and restored after it (``crosscheck._engine.call``), while JAX is imported."""

from __future__ import annotations

import os
import sys
from typing import Any

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
