"""A PyTorch module in training mode, as a port checks it (imported only when a port is used: it
imports torch).

In training mode a BatchNorm normalises with the batch's statistics and updates its running ones in
place. The loss, its gradient, the captures and the oracle's differences are functions of the batch
alone, so every such call runs with the running statistics' tracking off (``untracked``): batch
statistics, nothing written, the same result every call. The update itself is one call of its own
(``running``), on fresh copies of the buffers, whose values after the call are the updated running
statistics the judge compares with the JAX side's (``port.judge.running``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

#: PyTorch's BatchNorm classes (public): their running statistics are updated in training mode.
BATCH_NORMS = (
    torch.nn.BatchNorm1d,
    torch.nn.BatchNorm2d,
    torch.nn.BatchNorm3d,
    torch.nn.SyncBatchNorm,
)
#: PyTorch's dropout classes (public): random in training mode.
DROPOUTS = (
    torch.nn.Dropout,
    torch.nn.Dropout1d,
    torch.nn.Dropout2d,
    torch.nn.Dropout3d,
    torch.nn.AlphaDropout,
    torch.nn.FeatureAlphaDropout,
)
#: The running statistics of a BatchNorm, as its buffers are named.
STATISTICS = ("running_mean", "running_var")


def tracking(module: torch.nn.Module) -> list[tuple[str, torch.nn.Module]]:
    """The BatchNorm submodules in training mode that track running statistics, by name."""
    return [
        (n, m)
        for n, m in module.named_modules()
        if isinstance(m, BATCH_NORMS) and m.training and m.track_running_stats
    ]


def statistics(module: torch.nn.Module) -> list[str]:
    """The running-statistics buffers a training-mode forward of ``module`` updates (``bn.running_mean``)."""
    return [f"{n}.{s}" if n else s for n, m in tracking(module) for s in STATISTICS]


def random(module: torch.nn.Module) -> list[tuple[str, str]]:
    """The dropout submodules that drop at random (in training mode, ``p > 0``): ``(name, what)``."""
    return [
        (n, f"{type(m).__name__}, p={m.p}")
        for n, m in module.named_modules()
        if isinstance(m, DROPOUTS) and m.training and m.p > 0
    ]


@contextlib.contextmanager
def untracked(module: torch.nn.Module) -> Iterator[None]:
    """``module``'s BatchNorms in training mode with their running statistics' tracking off for the
    call: batch statistics, nothing written (the user's module as it was after)."""
    found = tracking(module)
    for _, m in found:
        m.track_running_stats = False
    try:
        yield
    finally:
        for _, m in found:
            m.track_running_stats = True


def running(wrapped: Any, state: dict[str, np.ndarray], inputs: dict[str, Any]) -> dict[str, np.ndarray]:
    """The running statistics one training-mode forward makes of ``state``'s (``statistics``), on fresh
    copies of every tensor (the case's arrays are never written), without autograd; a 16-bit statistic
    read in float32 (exact)."""
    after = updated(wrapped, state, inputs)
    return {k: after[k] for k in statistics(wrapped.m) if k in after}


def updated(wrapped: Any, state: dict[str, np.ndarray], inputs: dict[str, Any]) -> dict[str, np.ndarray]:
    """Every tensor of ``state`` after one training-mode forward on fresh copies of them (the buffers
    it updates: the running statistics and their ``num_batches_tracked``), without autograd."""
    tensors = {k: _tensor(v) for k, v in state.items()}
    given = {k: _tensor(v) if isinstance(v, np.ndarray) else v for k, v in inputs.items()}
    wrapped.track = True
    try:
        with torch.no_grad():
            torch.func.functional_call(wrapped, {f"m.{k}": v for k, v in tensors.items()}, (given,))
    finally:
        wrapped.track = False
    return {k: _numpy(v) for k, v in tensors.items()}


def _tensor(array: np.ndarray) -> torch.Tensor:
    """A fresh tensor of ``array``'s dtype (a bfloat16 one, which torch cannot read from NumPy, through
    float32: exact)."""
    if array.dtype.name == "bfloat16":
        return torch.tensor(np.asarray(array, np.float32), dtype=torch.bfloat16)
    return torch.tensor(np.array(array))


def _numpy(t: torch.Tensor) -> np.ndarray:
    return (t.float() if t.dtype in (torch.bfloat16, torch.float16) else t).numpy().copy()
