"""The straight-through-estimator stack (``ste-stack``): the ReLU stack whose activations are rounded
to a grid of ``1/8`` by ``y + stop_gradient(q(y) - y)``, ``q(y) = round(8 y) / 8``.

The value is exactly the rounded stack, yet the gradient is that of a *different* function, the
surrogate: the stack with the rounding replaced by ``y + c``, where ``c = q(y0) - y0`` is frozen at the
base point (``stop_gradient`` / ``.detach()`` cut that path from the derivative program). The oracle
therefore differentiates the surrogate, not the rounded loss, and says so; a naive finite difference of
the rounded loss gives zeros (it is piecewise constant: every small step leaves every rounded value,
hence the loss, unchanged).

``STE_STACK`` is a ``crosscheck.Workload`` with ``surrogate=``, registered as ``ste-stack``:
``crosscheck run --workload ste-stack`` checks it like any workload. ``crosscheck._evidence.ste``
(``crosscheck ste``) runs that check and puts the naive finite difference of the rounded loss beside it.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from crosscheck._workloads.model.declare import Workload

#: Rounding grid of the activations: a power of two, so ``round(8 y) / 8`` is exact in binary.
GRID = 8.0
DEFAULT_SHAPE = {"layers": 4, "batch": 8, "dim": 8}

WHY_SURROGATE = (
    "the AD backends compute the gradient of the surrogate, the stack with round(8y)/8 replaced by "
    "y + c, c = round(8y0)/8 - y0 frozen at the base point (stop_gradient / .detach() removed that path "
    "from the derivative program), so the oracle differentiates the surrogate"
)


def _quantize(y):
    return np.round(y * GRID) / GRID


def _forward(weights: np.ndarray, x: np.ndarray, offsets: np.ndarray | None) -> np.ndarray:
    """Losses of a batch of weight sets ``(B, L, d, d)``: rounded (``offsets`` None) or the surrogate."""
    y = np.broadcast_to(np.asarray(x, np.float64), (weights.shape[0], *np.shape(x)))
    for k in range(weights.shape[1]):
        y = np.maximum(y @ weights[:, k], 0.0)
        y = _quantize(y) if offsets is None else y + offsets[k]
    return np.einsum("bnd,bnd->b", y, y)


def rounded_losses(weights: np.ndarray, x: np.ndarray) -> np.ndarray:
    """The rounded loss of each of a batch of weight sets ``(B, L, d, d)`` at inputs ``x``, in float64:
    what a naive finite difference evaluates (``crosscheck._evidence.ste``)."""
    return _forward(weights, x, None)


def rounded_loss(params: dict[str, np.ndarray], inputs: dict[str, np.ndarray]) -> float:
    """The function the implementations compute, in float64: activations rounded to the grid."""
    return float(_forward(np.asarray(params["weights"], np.float64)[None], inputs["x"], None)[0])


def offsets(weights: np.ndarray, x: np.ndarray) -> np.ndarray:
    """The frozen ``c[k] = q(y[k]) - y[k]`` of the rounded forward pass at ``weights``, ``(L, N, d)``."""
    y, out = np.asarray(x, np.float64), []
    for w in np.asarray(weights, np.float64):
        y = np.maximum(y @ w, 0.0)
        out.append(_quantize(y) - y)
        y = y + out[-1]
    return np.stack(out)


def surrogate(
    params: dict[str, np.ndarray], inputs: dict[str, np.ndarray]
) -> Callable[[dict[str, np.ndarray]], float]:
    """The function whose gradient the STE computes at ``params``: the stack with ``c`` frozen there."""
    frozen = offsets(params["weights"], inputs["x"])

    def loss(p: dict[str, np.ndarray]) -> float:
        return float(_forward(np.asarray(p["weights"], np.float64)[None], inputs["x"], frozen)[0])

    return loss


def jax_loss(params, inputs):
    """The STE stack in JAX: ``y + lax.stop_gradient(round(8 y) / 8 - y)`` after every ReLU."""
    import jax
    import jax.numpy as jnp

    y = inputs["x"]
    for k in range(params["weights"].shape[0]):
        y = jax.nn.relu(y @ params["weights"][k])
        y = y + jax.lax.stop_gradient(jnp.round(y * GRID) / GRID - y)
    return jnp.sum(y**2)


def torch_loss(params, inputs):
    """The STE stack in PyTorch: ``y + (round(8 y) / 8 - y).detach()`` after every ReLU."""
    import torch

    y = inputs["x"]
    for k in range(params["weights"].shape[0]):
        y = torch.relu(y @ params["weights"][k])
        y = y + (torch.round(y * GRID) / GRID - y).detach()
    return torch.sum(y**2)


def _generate(rng: np.random.Generator, dtype: str, *, layers: int, batch: int, dim: int):
    # He scaling keeps the activations O(1) through the ReLUs, so the 1/8 grid is neither all-zero
    # nor negligible.
    weights = rng.standard_normal((layers, dim, dim)) * math.sqrt(2.0 / dim)
    return {"weights": weights}, {"x": rng.standard_normal((batch, dim))}


def ste_stack(*, layers: int = 4, batch: int = 8, dim: int = 8) -> Workload:
    """The ``ste-stack`` workload at a given shape (see the module docstring)."""

    def generate(rng, dtype):
        return _generate(rng, dtype, layers=layers, batch=batch, dim=dim)

    return Workload(
        name="ste-stack",
        parameters={"weights": (layers, dim, dim)},
        inputs={"x": (batch, dim)},
        reference=rounded_loss,
        implementations={"jax": jax_loss, "torch": torch_loss},
        generate=generate,
        surrogate=surrogate,
        description="ReLU stack with straight-through rounding of the activations to 1/8 (the oracle "
        "differentiates the surrogate)",
    )


STE_STACK = ste_stack()
