"""JAX adapter: ``lax.scan`` over the layers, each layer body wrapped in ``jax.checkpoint``."""

from __future__ import annotations

import contextlib

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["JaxBackend"]


def _layer(y, w):
    return jax.nn.relu(y @ w), None


def _loss(weights, x):
    final, _ = jax.lax.scan(jax.checkpoint(_layer), x, weights)
    return jnp.sum(final**2)


_grad = jax.jit(jax.grad(_loss, argnums=0))


def _loss_plain(weights, x):
    final, _ = jax.lax.scan(_layer, x, weights)
    return jnp.sum(final**2)


def _hvp_fn(loss):
    # A Hessian-vector product is a jvp of the grad: one tangent pushed forward through the gradient
    # program (no Hessian matrix is ever formed).
    return jax.jit(lambda weights, x, v: jax.jvp(lambda w: jax.grad(loss)(w, x), (weights,), (v,))[1])


_hvp = _hvp_fn(_loss)


# The same scan without jax.checkpoint: `explain` re-runs a mismatch with it.
_grad_plain = jax.jit(jax.grad(_loss_plain, argnums=0))
_hvp_plain = _hvp_fn(_loss_plain)


@jax.jit
def _activations(weights, x):
    _, ys = jax.lax.scan(lambda y, w: (jax.nn.relu(y @ w),) * 2, x, weights)
    return ys


class JaxBackend:
    """Gradient of the ReLU stack with ``jax.grad`` through a checkpointed ``lax.scan``.

    float64 inputs are computed in float64: x64 is enabled for the call only (``jax.enable_x64``), so
    the flag never leaks into other code.
    """

    name = "jax"

    def __init__(self) -> None:
        self._checkpoint = True

    def grad(self, weights: np.ndarray, x: np.ndarray) -> np.ndarray:
        grad = _grad if self._checkpoint else _grad_plain
        with jax.enable_x64(weights.dtype == np.float64):
            return np.asarray(grad(jnp.asarray(weights), jnp.asarray(x)))

    def hvp(self, weights: np.ndarray, x: np.ndarray, v: np.ndarray) -> np.ndarray:
        """The Hessian-vector product ``H v`` of the loss with respect to the weights, ``(L, d, d)``:
        ``jax.jvp(jax.grad(loss), (weights,), (v,))`` through the same checkpointed scan."""
        hvp = _hvp if self._checkpoint else _hvp_plain
        with jax.enable_x64(weights.dtype == np.float64):
            return np.asarray(hvp(jnp.asarray(weights), jnp.asarray(x), jnp.asarray(v)))

    @contextlib.contextmanager
    def without_checkpointing(self):
        """A context in which ``grad`` runs the same scan without ``jax.checkpoint`` (for ``explain``)."""
        self._checkpoint = False
        try:
            yield
        finally:
            self._checkpoint = True

    def activations(self, weights: np.ndarray, x: np.ndarray) -> np.ndarray:
        """The forward activations ``y[1] .. y[L]``, shape ``(L, N, d)`` (for localizing a mismatch)."""
        with jax.enable_x64(weights.dtype == np.float64):
            return np.asarray(_activations(jnp.asarray(weights), jnp.asarray(x)))

    def highest_precision(self):
        """A context in which matrix products run at full float32 precision (for ``explain``)."""
        return jax.default_matmul_precision("highest")

    def info(self) -> dict[str, str]:
        return {
            "framework": "jax",
            "version": jax.__version__,
            "device": str(jax.devices()[0]),
            "matmul_precision": str(jax.config.jax_default_matmul_precision),
        }
