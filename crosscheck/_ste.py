"""The straight-through-estimator stack (``ste-stack``): the ReLU stack whose activations are rounded
to a grid of ``1/8`` by ``y + stop_gradient(q(y) - y)``, ``q(y) = round(8 y) / 8``.

The value is exactly the rounded stack, yet the gradient is that of a *different* function, the
surrogate: the stack with the rounding replaced by ``y + c``, where ``c = q(y0) - y0`` is frozen at the
base point (``stop_gradient`` / ``.detach()`` cut that path from the derivative program). The oracle
therefore differentiates the surrogate, not the rounded loss, and says so; a naive finite difference of
the rounded loss gives zeros (it is piecewise constant: every small step leaves every rounded value,
hence the loss, unchanged).

``check_ste`` is a self-contained cross-check of this workload (``crosscheck ste``): the JAX and PyTorch
gradients against the surrogate oracle (``scipy.differentiate.derivative``, with its error estimate), and
the naive finite difference beside them. ``STE_STACK`` is also a ``crosscheck.Workload`` (registered as
``ste-stack``) with ``surrogate=``, for the generic workload driver.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from . import _stack
from ._compare import Comparison, Kinks, Tolerance, compare
from ._workload import Workload

#: Rounding grid of the activations: a power of two, so ``round(8 y) / 8`` is exact in binary.
GRID = 8.0
DEFAULT_SHAPE = {"layers": 4, "batch": 8, "dim": 8}
#: Perturbed weight sets evaluated at once by the oracle (bounds its memory).
_BATCH = 256

WHY_SURROGATE = (
    "the AD backends compute the gradient of the surrogate, the stack with round(8y)/8 replaced by "
    "y + c, c = round(8y0)/8 - y0 frozen at the base point (stop_gradient / .detach() removed that path "
    "from the derivative program), so the oracle differentiates the surrogate"
)
WHY_NAIVE = (
    "a finite difference of the rounded loss itself gives zeros: the loss is piecewise constant (a small "
    "step leaves every rounded activation, hence the loss, unchanged), so it is the exact derivative of "
    "the function computed, and not the gradient the backends were written to produce"
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


# --- the self-contained cross-check --------------------------------------------------------------------


def fd_gradient(
    loss_batch: Callable[[np.ndarray], np.ndarray], weights: np.ndarray, *, step: float, loss_terms: int
):
    """Every partial derivative of ``loss_batch`` (losses of ``(B, L, d, d)`` weight sets) at ``weights``
    by ``scipy.differentiate.derivative`` (central differences, steps halving from ``step``).

    Returns ``(value, error, converged)``, each shaped like ``weights``; ``error`` is scipy's estimate
    (the change between the last two steps) plus the rounding of the loss evaluations (``loss_terms``
    squares summed) divided by the last step.
    """
    from scipy.differentiate import derivative

    base = np.asarray(weights, np.float64).ravel()
    size = base.size

    def f(xi):
        # xi: (P,) or (P, n): parameter i set to xi[i, j]; everything else at the base point.
        given = xi.shape
        xi = xi.reshape(size, -1)
        count = xi.shape[1]
        out = np.empty(xi.shape)
        pairs = [(i, j) for j in range(count) for i in range(size)]
        for start in range(0, len(pairs), _BATCH):
            chunk = pairs[start : start + _BATCH]
            batch = np.broadcast_to(base, (len(chunk), size)).copy()
            rows, cols = np.array([i for i, _ in chunk]), np.array([j for _, j in chunk])
            batch[np.arange(len(chunk)), rows] = xi[rows, cols]
            out[rows, cols] = loss_batch(batch.reshape(len(chunk), *weights.shape))
        return out.reshape(given)

    loss = float(np.abs(loss_batch(base.reshape(1, *weights.shape))[0]))
    res = derivative(
        f,
        base,
        order=2,  # the surrogate is quadratic in each weight between kinks: a central difference is exact
        initial_step=step,
        maxiter=20,
        preserve_shape=True,
        tolerances={"atol": 1e-13 * (loss or 1.0), "rtol": 1e-10},
    )
    shape = weights.shape
    # Rounding of the two float64 loss evaluations divided by the last step (each loss is a sum of
    # N d squares: 8 x a worst-case sum error of 2N d unit roundoffs of the loss, generously).
    last_step = step / 2.0**res.nit
    rounding = _stack.SAFETY * 2 * loss_terms * _stack.UNIT_ROUNDOFF["float64"] * loss / last_step
    error = res.error + rounding
    return res.df.reshape(shape), error.reshape(shape), res.success.reshape(shape)


def naive_gradient(loss_batch: Callable[[np.ndarray], np.ndarray], weights: np.ndarray, *, step: float):
    """What a naive check does: one central difference per entry with a small step."""
    base = np.asarray(weights, np.float64)
    eye = np.eye(base.size).reshape(base.size, *base.shape) * step
    plus = np.concatenate([loss_batch(base + e) for e in np.array_split(eye, max(1, base.size // _BATCH))])
    minus = np.concatenate([loss_batch(base - e) for e in np.array_split(eye, max(1, base.size // _BATCH))])
    return ((plus - minus) / (2 * step)).reshape(base.shape)


@dataclasses.dataclass(frozen=True)
class SteReport:
    """The outcome of ``check_ste``: comparisons against the surrogate oracle, and the naive FD."""

    case: dict[str, Any]
    comparisons: list[Comparison]
    naive: dict[str, Any]
    oracle: dict[str, Any]
    failed: dict[str, str]

    @property
    def passed(self) -> bool:
        return not self.failed and bool(self.comparisons) and all(c.passed for c in self.comparisons)

    def to_dict(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "workload": "ste-stack",
            "case": self.case,
            "oracle": self.oracle,
            "comparisons": [c.to_dict() for c in self.comparisons],
            "naive_finite_difference": self.naive,
            "failed": self.failed,
        }


def autodiff_gradient(backend: str, weights: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``d loss / d weights`` of the STE implementation in ``backend`` (``"jax"`` or ``"torch"``)."""
    if backend not in ("jax", "torch"):
        raise ValueError(f"the STE stack has implementations for `jax` and `torch`; found `{backend}`.")
    if backend == "jax":
        import jax

        with jax.enable_x64(weights.dtype == np.float64):
            grad = jax.grad(lambda w: jax_loss({"weights": w}, {"x": jax.numpy.asarray(x)}))
            return np.asarray(grad(jax.numpy.asarray(weights)))
    import torch

    w = torch.tensor(weights, requires_grad=True)
    torch_loss({"weights": w}, {"x": torch.tensor(x)}).backward()
    return w.grad.numpy()


def check_ste(
    *, seed: int = 0, dtype: str = "float32", backends: tuple[Any, ...] = ("jax", "torch"), **shape: int
) -> SteReport:
    """Cross-check the STE stack's gradients: every backend against the surrogate oracle.

    Args:
        seed, dtype: the case (inputs from ``ste_stack(**shape).make``).
        backends: ``"jax"`` and/or ``"torch"``, or functions ``grad(weights, x)`` (their own STE
            gradients, in the inputs' dtype).
        shape: ``layers``, ``batch``, ``dim`` (default 4, 8, 8).
    """
    shape = {**DEFAULT_SHAPE, **shape}
    workload = ste_stack(**shape)
    params, inputs = workload.make(seed=seed, dtype=dtype)
    weights, x = params["weights"], inputs["x"]
    frozen = offsets(weights, x)
    rms = float(np.sqrt(np.mean(weights.astype(np.float64) ** 2)))
    # Start well inside the typical distance to a ReLU kink: the surrogate is quadratic in each weight
    # up to it, so the first central difference is already exact and scipy stops at once.
    value, error, converged = fd_gradient(
        lambda w: _forward(w, x, frozen), weights, step=rms / 64, loss_terms=x.size
    )
    naive = naive_gradient(lambda w: _forward(w, x, None), weights, step=NAIVE_STEP * rms)
    comparisons, failed = [], {}
    for backend in backends:
        name = backend if isinstance(backend, str) else getattr(backend, "__name__", repr(backend))
        fn = backend if callable(backend) else lambda w, x, name=name: autodiff_gradient(name, w, x)
        try:
            grad = np.asarray(fn(weights, x))
            other = np.asarray(fn(weights.astype(_OTHER[dtype]), x.astype(_OTHER[dtype])))
        except ImportError as exc:
            failed[name] = f"unavailable: {exc.name or exc} is not installed"
            continue
        comparisons.append(_compare(name, grad, other, value, error, converged, dtype))
    naive_record = {
        "method": "one central difference of the rounded loss per entry, step 2**-20 x the weights' RMS",
        "max_abs": float(np.max(np.abs(naive))),
        "zero_entries": int(np.count_nonzero(naive == 0)),
        "total": int(naive.size),
        "max_abs_diff_from_surrogate_oracle": float(np.max(np.abs(naive - value))),
        "why": WHY_NAIVE,
    }
    oracle = {
        "differentiates": "surrogate",
        "method": "scipy.differentiate.derivative, order 2, steps halving from 1/64 of the weights' RMS",
        "why": WHY_SURROGATE,
        "unconverged_entries": int(np.count_nonzero(~converged)),
        "rounded_activations": int(np.count_nonzero(frozen)),
    }
    case = {"workload": "ste-stack", **shape, "dtype": dtype, "seed": seed, "grid": 1 / GRID}
    return SteReport(case, comparisons, naive_record, oracle, failed)


_OTHER = {"float32": "float64", "float64": "float32"}
#: The naive check's step, relative to the weights' RMS.
NAIVE_STEP = 2.0**-20


def _compare(name, grad, other, value, error, converged, dtype) -> Comparison:
    # The candidate's own rounding, measured by its re-run in the other precision (as for the HVP).
    delta = np.abs(grad.astype(np.float64) - other.astype(np.float64))
    ratio = _stack.UNIT_ROUNDOFF[dtype] / _stack.UNIT_ROUNDOFF["float32"]
    rms = np.sqrt(np.mean(delta**2, axis=(1, 2), keepdims=True))
    u = _stack.UNIT_ROUNDOFF[dtype]
    tolerance = Tolerance(
        {
            "rerun": _stack.SAFETY * ratio * (delta + rms),
            "reference": error,
            "floor": _stack.SAFETY * u * float(np.max(np.abs(value))),
        }
    )
    unjudgeable = ~converged
    kinks = Kinks(
        unjudgeable,
        np.where(unjudgeable, "finite differences did not converge (a ReLU kink within the step)", "").astype(
            object
        ),
        np.full(value.shape + (3,), -1),
        np.full(value.shape, np.nan),
    )
    return compare(
        grad, value, tolerance, backend=name, reference_name="numpy-fd (surrogate)", dtype=dtype, kinks=kinks
    )
