"""PyTorch adapter for a workload's ``"torch"`` implementation: ``backward()`` on the loss, and the loss
itself under ``torch.no_grad()`` for the oracle."""

from __future__ import annotations

import numpy as np
import torch

from .arrays import numpy, tensor

__all__ = ["TorchWorkloadBackend"]


class TorchWorkloadBackend:
    """The gradient of ``loss(params, inputs)`` (a 0-d tensor) with ``backward()``.

    Every parameter is a fresh leaf tensor (``torch.tensor`` copies, so the caller's arrays are never
    shared with autograd); a parameter the loss does not use gets a zero gradient.
    """

    def __init__(self, name: str, loss) -> None:
        self.name = name
        self._loss = loss

    def grad(self, params: dict[str, np.ndarray], inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        leaves = {k: tensor(v, requires_grad=True) for k, v in params.items()}
        loss = self._loss(leaves, {k: tensor(v) for k, v in inputs.items()})
        loss.backward()
        return {
            k: numpy(t.grad) if t.grad is not None else np.zeros_like(params[k]) for k, t in leaves.items()
        }

    def loss(self, params: dict[str, np.ndarray], inputs: dict[str, np.ndarray]) -> np.ndarray:
        """The loss under ``torch.no_grad()`` (no graph is built), as a 0-d NumPy array of its dtype.

        The arrays are copied into tensors of their own dtype: float64 arrays give a float64 computation
        unless the implementation casts.
        """
        with torch.no_grad():
            out = self._loss(
                {k: tensor(v) for k, v in params.items()},
                {k: tensor(v) for k, v in inputs.items()},
            )
            if not isinstance(out, torch.Tensor):
                return np.asarray(out)
            return numpy(out.detach().cpu()).copy()

    def losses(
        self, params: dict[str, np.ndarray], inputs: dict[str, np.ndarray], batched: tuple[str, ...]
    ) -> np.ndarray:
        """The loss at ``k`` points in one call (the oracle's batched evaluations): the tensors named in
        ``batched`` carry a leading axis of ``k``; ``torch.func.vmap`` over them, under
        ``torch.no_grad()``. A model ``vmap`` cannot run raises (the oracle then evaluates one point a
        call)."""
        dims = {k: 0 if k in batched else None for k in params}
        with torch.no_grad():
            out = torch.func.vmap(self._loss, in_dims=(dims, None))(
                {k: torch.tensor(v) for k, v in params.items()},
                {k: torch.tensor(v) for k, v in inputs.items()},
            )
        return out.detach().cpu().numpy().copy()

    def info(self) -> dict[str, str]:
        return {
            "framework": "torch",
            "version": torch.__version__,
            "device": "cpu",
            "float32_matmul_precision": torch.get_float32_matmul_precision(),
        }
