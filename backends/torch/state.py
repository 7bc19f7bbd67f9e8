"""PyTorch's settings a backend may change and the next backend would inherit: read before every
guarded call and restored after it (``crosscheck._engine.call``), while PyTorch is imported."""

from __future__ import annotations

import sys
from typing import Any

#: The settings as they are before anything changed them (a backend may import PyTorch first).
DEFAULTS: dict[str, Any] = {
    "torch default dtype": "float32",
    "torch float32 matmul precision": "highest",
    "torch grad mode": True,
}


def read() -> dict[str, Any]:
    """The settings now (none while PyTorch is only partly imported)."""
    torch = sys.modules.get("torch")
    if torch is None or not hasattr(torch, "get_default_dtype"):
        return {}
    return {
        "torch default dtype": str(torch.get_default_dtype()).removeprefix("torch."),
        "torch float32 matmul precision": torch.get_float32_matmul_precision(),
        "torch grad mode": torch.is_grad_enabled(),
    }


def write(key: str, value: Any) -> None:
    """Set the setting ``key`` (one of ``DEFAULTS``) to ``value``."""
    torch = sys.modules["torch"]
    if key == "torch default dtype":
        torch.set_default_dtype(getattr(torch, value))
    elif key == "torch float32 matmul precision":
        torch.set_float32_matmul_precision(value)
    elif key == "torch grad mode":
        torch.set_grad_enabled(value)
