"""PyTorch adapter: each layer through ``torch.utils.checkpoint.checkpoint(use_reentrant=False)``."""

from __future__ import annotations

import contextlib

import numpy as np
import torch
from torch.utils.checkpoint import checkpoint

__all__ = ["TorchBackend"]


def _layer(y: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.relu(y @ w)


class TorchBackend:
    """Gradient of the ReLU stack with ``backward()``; every layer is checkpointed."""

    name = "torch"

    def __init__(self) -> None:
        self._checkpoint = True

    def grad(self, weights: np.ndarray, x: np.ndarray) -> np.ndarray:
        # torch.tensor copies: the caller's arrays are never shared with autograd.
        w = torch.tensor(weights, requires_grad=True)
        self._loss(w, torch.tensor(x)).backward()
        return w.grad.numpy()

    def hvp(self, weights: np.ndarray, x: np.ndarray, v: np.ndarray) -> np.ndarray:
        """The Hessian-vector product ``H v`` with respect to the weights, ``(L, d, d)``: double
        backward (``create_graph=True``) through the same checkpointed layers."""
        w = torch.tensor(weights, requires_grad=True)
        (g,) = torch.autograd.grad(self._loss(w, torch.tensor(x)), w, create_graph=True)
        (hv,) = torch.autograd.grad(g, w, grad_outputs=torch.tensor(v))
        return hv.detach().numpy()

    def _loss(self, w: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        for k in range(w.shape[0]):
            if self._checkpoint:
                y = checkpoint(_layer, y, w[k], use_reentrant=False)
            else:
                y = _layer(y, w[k])
        return torch.sum(y**2)

    def activations(self, weights: np.ndarray, x: np.ndarray) -> np.ndarray:
        """The forward activations ``y[1] .. y[L]``, shape ``(L, N, d)`` (for localizing a mismatch)."""
        with torch.no_grad():
            y, out = torch.tensor(x), []
            for w in torch.tensor(weights):
                y = _layer(y, w)
                out.append(y.numpy())
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
            "device": "cpu",
            "float32_matmul_precision": torch.get_float32_matmul_precision(),
            "threads": str(torch.get_num_threads()),
        }
