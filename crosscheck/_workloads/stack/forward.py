"""The ReLU stack's float64 passes: ``forward`` (every activation and pre-activation) and ``backward``
(``dloss/dz`` and ``dloss/dW``), used to size tolerances and error bars and to judge which entries a
ReLU sign flip can move, never as the oracle's values (``rounding`` models their rounding)."""

from __future__ import annotations

import dataclasses

import numpy as np

from crosscheck._workloads.stack.oracle import parallel as _parallel


@dataclasses.dataclass(frozen=True)
class Forward:
    """The float64 forward pass: ``ys`` (L + 1 arrays ``(N, d)``), ``zs`` and ``masks`` (L arrays)."""

    weights: np.ndarray
    ys: list[np.ndarray]
    zs: list[np.ndarray]
    masks: list[np.ndarray]

    @property
    def loss(self) -> float:
        return float(np.sum(self.ys[-1] ** 2))

    def squared_weight(self, layer: int) -> np.ndarray:
        """``weights[layer] ** 2``, a ``(d, d)`` layer at a time: never the whole ``(L, d, d)`` square
        (one float64 array of the weights' size less, for as long as the pass is kept)."""
        return np.square(self.weights[layer])


@_parallel.blas_on_one_thread
def forward(weights: np.ndarray, x: np.ndarray, masks: list[np.ndarray] | None = None) -> Forward:
    """Run the stack in float64 (the inputs' values are kept exactly).

    With ``masks`` (L arrays ``(N, d)`` of bool) the ReLUs are held at them, whatever the signs: the
    stack on that activation pattern, a product of matrices (``pattern``).
    """
    weights = np.asarray(weights, dtype=np.float64)
    y = np.asarray(x, dtype=np.float64)
    ys, zs, held, masks = [y], [], masks, []
    for m, w in enumerate(weights):
        z = y @ w
        mask = z > 0 if held is None else held[m]  # derivative 0 at an exact zero, as jax.nn.relu
        y = np.where(mask, z, 0.0)
        ys.append(y)
        zs.append(z)
        masks.append(mask)
    return Forward(weights, ys, zs, masks)


@_parallel.blas_on_one_thread
def backward(fwd: Forward, *, grads: bool = True) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Return ``(deltas, grads)``: ``deltas[m] = dloss/dz[m]`` and ``grads[m] = dloss/dW[m]`` (empty
    arrays with ``grads=False``, for a caller that needs the deltas only: a ``(L, d, d)`` array less)."""
    g = 2.0 * fwd.ys[-1]
    deltas: list[np.ndarray] = [np.empty(0)] * len(fwd.zs)  # every entry is set below
    found: list[np.ndarray] = [np.empty(0)] * len(fwd.zs)
    for m in reversed(range(len(fwd.zs))):
        delta = g * fwd.masks[m]
        deltas[m] = delta
        if grads:
            found[m] = fwd.ys[m].T @ delta
        g = delta @ fwd.weights[m].T
    return deltas, found
