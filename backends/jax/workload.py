"""JAX adapter for a workload's ``"jax"`` implementation: ``jax.grad`` over the parameters dict, and the
loss itself (no autodiff) for the oracle."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["JaxWorkloadBackend"]


def _wide(*groups: dict[str, np.ndarray]) -> bool:
    return any(v.dtype == np.float64 for group in groups for v in group.values())


def _device(arrays: dict[str, np.ndarray]) -> dict[str, jax.Array]:
    return {k: jnp.asarray(v) for k, v in arrays.items()}


class JaxWorkloadBackend:
    """The gradient of ``loss(params, inputs)`` with ``jax.jit(jax.grad(loss))``; the loss with
    ``jax.jit(loss)`` (compiled, never differentiated: what the oracle differences).

    float64 arrays are computed in float64: x64 is enabled for the call only (``jax.enable_x64``), so
    the flag never leaks into other code.
    """

    def __init__(self, name: str, loss) -> None:
        self.name = name
        self._raw = loss
        self._grad = jax.jit(jax.grad(loss))
        self._loss = jax.jit(loss)
        self._many: dict[tuple, Any] = {}

    def grad(self, params: dict[str, np.ndarray], inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        with jax.enable_x64(_wide(params, inputs)):
            grads = self._grad(_device(params), _device(inputs))
            return {k: np.asarray(v) for k, v in grads.items()}

    def loss(self, params: dict[str, np.ndarray], inputs: dict[str, np.ndarray]) -> np.ndarray:
        """The loss as a 0-d NumPy array of the dtype it was computed in (float64 arrays: x64 on)."""
        with jax.enable_x64(_wide(params, inputs)):
            return np.asarray(self._loss(_device(params), _device(inputs)))

    def losses(
        self, params: dict[str, np.ndarray], inputs: dict[str, np.ndarray], batched: tuple[str, ...]
    ) -> np.ndarray:
        """The loss at ``k`` points in one call (the oracle's batched evaluations): the tensors named in
        ``batched`` carry a leading axis of ``k``. One jitted function, ``jax.vmap`` over the points,
        compiled once per set of tensors; ``k`` is padded to a power of two (a copy of the first point),
        so that a run compiles it for few sizes."""
        key = (tuple(params), tuple(batched))
        if key not in self._many:
            axes = {k: 0 if k in batched else None for k in params}
            self._many[key] = jax.jit(jax.vmap(self._raw, in_axes=(axes, None)))
        count = len(params[batched[0]])
        size = 1 << (count - 1).bit_length()
        padded = {
            k: np.concatenate([v, np.repeat(v[:1], size - count, axis=0)]) if k in batched else v
            for k, v in params.items()
        }
        with jax.enable_x64(_wide(params, inputs)):
            return np.asarray(self._many[key](_device(padded), _device(inputs)))[:count]

    def info(self) -> dict[str, str]:
        return {
            "framework": "jax",
            "version": jax.__version__,
            "device": str(jax.devices()[0]),
            "matmul_precision": str(jax.config.jax_default_matmul_precision),
        }
