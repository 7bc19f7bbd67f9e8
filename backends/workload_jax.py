"""JAX adapter for a workload's ``"jax"`` implementation: ``jax.grad`` over the parameters dict."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["JaxWorkloadBackend"]


class JaxWorkloadBackend:
    """The gradient of ``loss(params, inputs)`` with ``jax.jit(jax.grad(loss))``.

    float64 arrays are computed in float64: x64 is enabled for the call only (``jax.enable_x64``), so
    the flag never leaks into other code.
    """

    def __init__(self, name: str, loss) -> None:
        self.name = name
        self._grad = jax.jit(jax.grad(loss))

    def grad(self, params: dict[str, np.ndarray], inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        wide = any(v.dtype == np.float64 for v in (*params.values(), *inputs.values()))
        with jax.enable_x64(wide):
            grads = self._grad(
                {k: jnp.asarray(v) for k, v in params.items()}, {k: jnp.asarray(v) for k, v in inputs.items()}
            )
            return {k: np.asarray(v) for k, v in grads.items()}

    def info(self) -> dict[str, str]:
        return {
            "framework": "jax",
            "version": jax.__version__,
            "device": str(jax.devices()[0]),
            "matmul_precision": str(jax.config.jax_default_matmul_precision),
        }
