"""JAX adapters: ``lax.scan`` over the layers, each layer body wrapped in ``jax.checkpoint`` (``jax``);
the same scan without checkpointing (``jax-plain``), with the whole scan checkpointed (``jax-remat-scan``),
or in about sqrt(L) checkpointed segments (``jax-segments``).

Each class says what it claims in ``claims`` and exposes the loss it differentiates in ``loss_fn()``,
so that ``crosscheck inspect`` can check the claim on the traced gradient program.
"""

from __future__ import annotations

import contextlib
import functools
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from crosscheck._compare.device import Arithmetic

from . import environment, program, rounded

__all__ = ["JaxBackend", "JaxPlainBackend", "JaxRematScanBackend", "JaxSegmentsBackend"]


def _layer(y, w):
    return jax.nn.relu(y @ w), None


def _loss(weights, x):
    final, _ = jax.lax.scan(jax.checkpoint(_layer), x, weights)
    return jnp.sum(final**2)


_grad = jax.jit(jax.grad(_loss, argnums=0))


def _loss_plain(weights, x):
    final, _ = jax.lax.scan(_layer, x, weights)
    return jnp.sum(final**2)


@functools.cache
def _hvp_fn(loss):
    # A Hessian-vector product is a jvp of the grad: one tangent pushed forward through the gradient
    # program (no Hessian matrix is ever formed).
    return jax.jit(lambda weights, x, v: jax.jvp(lambda w: jax.grad(loss)(w, x), (weights,), (v,))[1])


# The same scan without jax.checkpoint: `explain` re-runs a mismatch with it.
_grad_plain = jax.jit(jax.grad(_loss_plain, argnums=0))


def _loss_remat_scan(weights, x):
    # The brief's other valid boundary: the function containing the whole scan is checkpointed.
    final = jax.checkpoint(lambda w, y: jax.lax.scan(_layer, y, w)[0])(weights, x)
    return jnp.sum(final**2)


def segment_length(layers: int) -> int:
    """Layers per checkpointed segment: the largest divisor of ``layers`` not above ceil(sqrt(layers))."""
    cap = int(np.ceil(np.sqrt(layers)))
    return max(s for s in range(1, cap + 1) if layers % s == 0)


def _segment(y, ws):
    return jax.lax.scan(_layer, y, ws)[0], None


def _loss_segments(weights, x):
    # Only every segment's input is kept; backward recomputes one segment (s layers) at a time.
    layers = weights.shape[0]
    s = segment_length(layers)
    segments = weights.reshape(layers // s, s, *weights.shape[1:])
    final, _ = jax.lax.scan(jax.checkpoint(_segment), x, segments)
    return jnp.sum(final**2)


_grad_remat_scan = jax.jit(jax.grad(_loss_remat_scan, argnums=0))
_grad_segments = jax.jit(jax.grad(_loss_segments, argnums=0))


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
    #: What this backend says it does; ``crosscheck inspect`` checks it on the gradient program.
    claims: ClassVar[dict] = {"scan": True, "checkpoint": "layer"}
    _losses = (_loss, _grad)

    def __init__(self) -> None:
        self._checkpoint = True

    def _current(self):
        return self._losses if self._checkpoint else (_loss_plain, _grad_plain)

    def grad(self, weights: np.ndarray, x: np.ndarray) -> np.ndarray:
        grad = self._current()[1]
        # jax.device_put, not jnp.asarray: the latter compiles a small program per shape and dtype
        # (~40 ms each on a first call here); both copy the NumPy array as it is.
        with jax.enable_x64(weights.dtype == np.float64):
            return np.asarray(grad(jax.device_put(weights), jax.device_put(x)))

    def loss_fn(self):
        """The scalar loss ``(weights, x) -> sum(y_L ** 2)`` whose ``jax.grad`` ``grad`` computes."""
        return self._current()[0]

    def hvp(self, weights: np.ndarray, x: np.ndarray, v: np.ndarray) -> np.ndarray:
        """The Hessian-vector product ``H v`` of the loss with respect to the weights, ``(L, d, d)``:
        ``jax.jvp(jax.grad(loss), (weights,), (v,))`` through the same scan (and checkpoints)."""
        hvp = _hvp_fn(self._current()[0])
        with jax.enable_x64(weights.dtype == np.float64):
            return np.asarray(hvp(jax.device_put(weights), jax.device_put(x), jax.device_put(v)))

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
            return np.asarray(_activations(jax.device_put(weights), jax.device_put(x)))

    def highest_precision(self):
        """A context in which matrix products run at full float32 precision (for ``explain``)."""
        return jax.default_matmul_precision("highest")

    def arithmetic(self) -> Arithmetic:
        """Where this side computes now (the judge models an accelerator's float32 rounding)."""
        return environment.arithmetic()

    def modelled(self, params: dict, inputs: dict, unit: float | None) -> dict:
        """The gradient of the point's ``weights`` and ``x`` as ``grad`` makes it, each product JAX's default
        precision makes taking its float32 inputs rounded to ``unit`` (None: unrounded), where the side
        runs now: the device model of its reduced-precision products (``crosscheck._compare.modelled``)."""
        loss, grad = self._current()
        fn = grad if unit is None else rounded.rounded(jax.grad(loss), rounded.mantissa(unit))
        weights, x = params["weights"], inputs["x"]
        with jax.enable_x64(weights.dtype == np.float64):
            return {"weights": np.asarray(fn(jax.device_put(weights), jax.device_put(x)))}

    def program(self, params: dict[str, dict], inputs: dict[str, dict]) -> dict:
        """The program ``grad`` runs for the point's ``weights`` and ``x`` of these shapes and dtypes
        (``crosscheck._backends.program.specs``), traced where the side runs now, not compiled."""
        weights, x = program.abstract(params)["weights"], program.abstract(inputs)["x"]
        with jax.enable_x64(program.wide(params, inputs)):
            return program.traced(jax.grad(self._current()[0]), weights, x)

    def info(self) -> dict[str, str]:
        return {
            "framework": "jax",
            "version": jax.__version__,
            **environment.side(),
        }


class JaxPlainBackend(JaxBackend):
    """The same ``lax.scan`` without any checkpointing: every residual is kept from forward to backward."""

    name = "jax-plain"
    claims: ClassVar[dict] = {"scan": True, "checkpoint": None}
    _losses = (_loss_plain, _grad_plain)


class JaxRematScanBackend(JaxBackend):
    """``jax.checkpoint`` around the function holding the whole scan (one boundary for all layers)."""

    name = "jax-remat-scan"
    claims: ClassVar[dict] = {"scan": True, "checkpoint": "scan"}
    _losses = (_loss_remat_scan, _grad_remat_scan)


class JaxSegmentsBackend(JaxBackend):
    """An outer ``lax.scan`` over about sqrt(L) segments, each a checkpointed inner scan of layers."""

    name = "jax-segments"
    claims: ClassVar[dict] = {"scan": True, "checkpoint": "segment"}
    _losses = (_loss_segments, _grad_segments)
