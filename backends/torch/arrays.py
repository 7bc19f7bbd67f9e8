"""PyTorch tensors where crosscheck meets them: a backend's result, and ``projection_loss``'s outputs."""

from __future__ import annotations

import sys
from typing import Any

import numpy as np


def to_numpy(value: Any) -> tuple[Any, str | None]:
    """``(value, note)``: a tensor as a NumPy array (detached, on the CPU, its lazy conjugate and
    negation applied), noting a detach; anything else unchanged."""
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(value, torch.Tensor):
        return value, None
    note = None
    if value.requires_grad:
        note = "returned a torch tensor that requires grad: detached (values compared)"
    return value.detach().cpu().resolve_conj().resolve_neg().numpy(), note


def projection_loss(outputs: Any, r: np.ndarray) -> Any:
    """``sum(r * outputs)`` as a 0-d tensor of the outputs' dtype and device (differentiable)."""
    import torch

    return torch.sum(outputs * torch.tensor(r, dtype=outputs.dtype, device=outputs.device))
