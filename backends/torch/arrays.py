"""PyTorch tensors where crosscheck meets them: a backend's result, and ``projection_loss``'s outputs."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import numpy as np

from crosscheck._compare.dtypes import numpy_dtype

if TYPE_CHECKING:  # PyTorch is imported when a tensor is made, not with crosscheck
    import torch


def to_numpy(value: Any) -> tuple[Any, str | None]:
    """``(value, note)``: a tensor as a NumPy array (detached, on the CPU, its lazy conjugate and
    negation applied), noting a detach; anything else unchanged."""
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(value, torch.Tensor):
        return value, None
    note = None
    if value.requires_grad:
        note = "returned a torch tensor that requires grad: detached (values compared)"
    return numpy(value.detach().cpu().resolve_conj().resolve_neg()), note


def numpy(tensor: Any) -> np.ndarray:
    """A CPU tensor as a NumPy array; bfloat16 (which ``Tensor.numpy`` refuses) as ``ml_dtypes``'."""
    torch = sys.modules["torch"]
    if tensor.dtype == torch.bfloat16:
        return tensor.float().numpy().astype(numpy_dtype("bfloat16"))  # exact: bfloat16 is in float32
    return tensor.numpy()


def tensor(array: np.ndarray, **options: Any) -> torch.Tensor:
    """A NumPy array as a new tensor of its dtype (a bfloat16 one through float32, exactly)."""
    import torch

    if array.dtype.name == "bfloat16":
        return torch.tensor(array.astype(np.float32), dtype=torch.bfloat16, **options)
    return torch.tensor(array, **options)


def share(array: np.ndarray, **options: Any) -> torch.Tensor:
    """A tensor over ``array``'s own memory (``torch.from_numpy``: no copy), or a new one (``tensor``)
    where torch cannot wrap it (bfloat16, a read-only array, another byte order, a negative stride).

    Only for an array nobody else holds: the engine's guarded call hands a backend private copies and
    compares each bit for bit after the call with what it was copied from, so a write into the shared
    memory fails the call as a write into a copy would not (a copy of every parameter saved
    on each gradient)."""
    import torch

    if isinstance(array, np.ndarray) and array.flags.writeable and array.dtype.name != "bfloat16":
        try:
            out = torch.from_numpy(array)
        except (TypeError, ValueError):  # a dtype torch lacks, another byte order, a negative stride
            pass
        else:
            return out.requires_grad_() if options.get("requires_grad") else out
    return tensor(array, **options)


def projection_loss(outputs: torch.Tensor, r: np.ndarray) -> torch.Tensor:
    """``sum(r * outputs)`` as a 0-d tensor of the outputs' dtype and device (differentiable)."""
    import torch

    return torch.sum(outputs * torch.tensor(r, dtype=outputs.dtype, device=outputs.device))
