"""PyTorch adapters: each layer through ``torch.utils.checkpoint.checkpoint(use_reentrant=False)``
(``torch``); the same layers without checkpointing (``torch-plain``); or about sqrt(L) checkpointed
segments with ``torch.utils.checkpoint.checkpoint_sequential`` (``torch-segments``).

Each class says what it claims in ``claims``; ``crosscheck inspect`` checks it by watching ``grad``
run (which operations run again during backward, which tensors autograd saves).
"""

from __future__ import annotations

import contextlib
import functools
from typing import ClassVar

import numpy as np
import torch
from torch.utils.checkpoint import checkpoint, checkpoint_sequential

from . import environment
from .arrays import numpy as _numpy
from .arrays import tensor as _tensor

__all__ = ["TorchBackend", "TorchPlainBackend", "TorchSegmentsBackend"]


def _layer(y: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.relu(y @ w)


def _plain(w: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    for k in range(w.shape[0]):
        y = _layer(y, w[k])
    return y


class TorchBackend:
    """Gradient of the ReLU stack with ``backward()``; every layer is checkpointed."""

    name = "torch"
    #: What this backend says it does; ``crosscheck inspect`` checks it by watching ``grad`` run.
    claims: ClassVar[dict] = {"checkpoint": "layer"}

    def __init__(self) -> None:
        self._checkpoint = True

    def grad(self, weights: np.ndarray, x: np.ndarray) -> np.ndarray:
        # torch.tensor copies: the caller's arrays are never shared with autograd. A bfloat16 or
        # float16 case computes in that dtype, as PyTorch does (products accumulate in float32).
        w = _tensor(weights, requires_grad=True)
        self._loss(w, _tensor(x)).backward()
        return _numpy(w.grad)

    def hvp(self, weights: np.ndarray, x: np.ndarray, v: np.ndarray) -> np.ndarray:
        """The Hessian-vector product ``H v`` with respect to the weights, ``(L, d, d)``: double
        backward (``create_graph=True``) through the same checkpointed layers."""
        w = _tensor(weights, requires_grad=True)
        (g,) = torch.autograd.grad(self._loss(w, _tensor(x)), w, create_graph=True)
        (hv,) = torch.autograd.grad(g, w, grad_outputs=_tensor(v))
        return _numpy(hv.detach())

    def _loss(self, w: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        y = self._forward(w, y) if self._checkpoint else _plain(w, y)
        return torch.sum(y**2)

    def _forward(self, w: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        for k in range(w.shape[0]):
            y = checkpoint(_layer, y, w[k], use_reentrant=False)
        return y

    def activations(self, weights: np.ndarray, x: np.ndarray) -> np.ndarray:
        """The forward activations ``y[1] .. y[L]``, shape ``(L, N, d)`` (for localizing a mismatch)."""
        with torch.no_grad():
            y, out = _tensor(x), []
            for w in _tensor(weights):
                y = _layer(y, w)
                out.append(_numpy(y))
        return np.stack(out)

    @contextlib.contextmanager
    def without_checkpointing(self):
        """A context in which ``grad`` runs the same layers without checkpointing (for ``explain``)."""
        self._checkpoint = False
        try:
            yield
        finally:
            self._checkpoint = True

    @contextlib.contextmanager
    def highest_precision(self):
        """A context in which float32 matrix products run at full precision (restored after)."""
        before = torch.get_float32_matmul_precision()
        torch.set_float32_matmul_precision("highest")
        try:
            yield
        finally:
            torch.set_float32_matmul_precision(before)

    def info(self) -> dict[str, str]:
        return {
            "framework": "torch",
            "version": torch.__version__,
            **environment.side(placed=False),
            "threads": str(torch.get_num_threads()),
        }


class TorchPlainBackend(TorchBackend):
    """The same layers without checkpointing: autograd keeps what every layer saves."""

    name = "torch-plain"
    claims: ClassVar[dict] = {"checkpoint": None}

    def _forward(self, w: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return _plain(w, y)


class TorchSegmentsBackend(TorchBackend):
    """``checkpoint_sequential`` over the layers in about sqrt(L) segments (the last one is not
    checkpointed: PyTorch runs it plainly, as its backward follows at once)."""

    name = "torch-segments"
    claims: ClassVar[dict] = {"checkpoint": "segment"}

    def _forward(self, w: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        layers = w.shape[0]
        cap = int(np.ceil(np.sqrt(layers)))
        s = max(s for s in range(1, cap + 1) if layers % s == 0)
        if layers == 1:  # one segment of one layer: checkpoint_sequential would run it plainly
            return checkpoint(_layer, y, w[0], use_reentrant=False)
        functions = [functools.partial(_apply, w, k) for k in range(layers)]
        # At least two segments: checkpoint_sequential never checkpoints the last one.
        return checkpoint_sequential(functions, max(2, layers // s), y, use_reentrant=False)


def _apply(w: torch.Tensor, k: int, y: torch.Tensor) -> torch.Tensor:
    return _layer(y, w[k])
