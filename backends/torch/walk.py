"""PyTorch: a backend's ``grad`` watched while it runs, with no help from the backend.

A dispatch mode counts every aten operation and whether autograd's engine runs it (backward);
``saved_tensors_hooks`` records every tensor autograd saves during forward, and who asked.
"""

from __future__ import annotations

import os
import sys
from collections import Counter
from types import FrameType
from typing import Any

import numpy as np

from crosscheck._tools.inspect_records import Residual, Structure


def inspect_backend(
    backend: Any, weights: np.ndarray, x: np.ndarray, result: Structure, *, check_loss: bool
) -> None:
    """What ``crosscheck inspect`` does with a PyTorch backend: watch one run of ``grad``
    (``check_loss``: no separate loss to check, the run watched is ``grad`` itself)."""
    inspect_torch_backend(backend, weights, x, result)


def inspect_torch_backend(backend: Any, weights: np.ndarray, x: np.ndarray, result: Structure) -> None:
    """Fill ``result``'s residuals, findings and evidence by watching one run of ``backend.grad``."""
    ops, saved = watch_torch(backend, weights, x)
    layers = result.layers
    forward_relu = sum(n for (op, backward), n in ops.items() if op.startswith("aten.relu") and not backward)
    recomputed = sum(n for (op, backward), n in ops.items() if op.startswith("aten.relu") and backward)
    result.residuals = saved
    ckpt_inputs = [r for r in saved if r.origin == "checkpoint input" and r.role == "activation"]
    other = [r for r in saved if r.origin != "checkpoint input" and r.role == "activation"]
    if recomputed == 0:
        checkpoint = None
    elif recomputed == layers and len(ckpt_inputs) == layers:
        checkpoint = "layer"
    elif 0 < len(ckpt_inputs) < layers:
        checkpoint = "segment"
    else:
        checkpoint = "other"
    result.found = {
        "checkpoint": checkpoint,
        "forward_layers": forward_relu,
        "recomputed_layers": recomputed,
        "checkpoint_inputs": len(ckpt_inputs),
        "saved_outside_checkpoints": len(other),
        "why_not": "no layer's forward ran again during backward (0 ReLUs recomputed), and autograd "
        f"saved {len(other)} activations outside any checkpoint"
        if checkpoint is None
        else "",
    }
    result.evidence.append(
        f"forward ran {forward_relu} layer(s); during backward {recomputed} layer forward(s) ran again "
        "(counted as ReLUs executed by autograd's engine)"
    )
    result.evidence.append(
        f"autograd saved {len(ckpt_inputs)} activation(s) as checkpoint inputs and {len(other)} "
        f"elsewhere ({', '.join(sorted({r.origin for r in other})) or 'none'})"
    )


def watch_torch(backend: Any, weights: np.ndarray, x: np.ndarray) -> tuple[Counter, list[Residual]]:
    """Run ``backend.grad`` once, recording every aten operation (and whether it ran in backward) and
    every tensor autograd saved during forward (deduplicated: a tensor saved twice counts once)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    ops: Counter = Counter()
    saved: dict[tuple, Residual] = {}

    class Recorder(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            ops[(str(func), torch._C._current_autograd_node() is not None)] += 1
            return func(*args, **(kwargs or {}))

    def pack(tensor):
        if torch._C._current_autograd_node() is None:  # kept from forward to backward
            key = (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape))
            saved.setdefault(key, _torch_residual(tensor))
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), Recorder():
        backend.grad(weights, x)
    return ops, list(saved.values())


def _torch_residual(tensor: Any) -> Residual:
    base = tensor._base if tensor._base is not None else tensor
    is_weights = base.is_leaf and base.requires_grad
    return Residual(
        tuple(int(n) for n in tensor.shape),
        str(tensor.dtype).removeprefix("torch."),
        tensor.numel() * tensor.element_size(),
        _torch_origin(),
        "weights" if is_weights else "activation",
    )


def _torch_origin() -> str:
    """Who asked autograd to save: a checkpoint's inputs, or an operation in the user's code."""
    import torch

    frame: FrameType | None = sys._getframe(2)
    # PyTorch's own folder, not any path with a `torch` folder in it (this adapter's is one).
    torch_dir = os.path.dirname(torch.__file__) + os.sep
    while frame is not None:
        filename = frame.f_code.co_filename
        if filename.endswith(os.path.join("utils", "checkpoint.py")) and torch_dir in filename:
            return "checkpoint input"
        # The hooks that call this live in this module: skip its frames to reach the backend's code.
        if torch_dir not in filename and filename != __file__:
            return f"saved by autograd in {frame.f_code.co_name} ({os.path.basename(filename)})"
        frame = frame.f_back
    return "saved by autograd"
