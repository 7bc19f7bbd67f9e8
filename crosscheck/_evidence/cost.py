"""What stacking transforms costs: flops of forward, gradient, HVP and full Hessian of the stack.

Three counts side by side: the analytic count of the matrix products (``2 N d d`` flops each), XLA's
compiled cost analysis for JAX and ``torch.utils.flop_counter.FlopCounterMode`` for PyTorch.

Products of each program (``m = 2 N d**2`` flops each, ``P = L d**2`` parameters):

- forward: ``L`` products ``y @ W``.
- gradient (reverse mode): the forward, then per layer ``y.T @ delta`` (the weight gradient) and
  ``delta @ W.T`` (passed down), except at layer 0 where nothing needs it: ``3L - 1``.
- HVP (forward over reverse, ``jvp`` of ``grad``): every product ``A @ B`` of the gradient program gains
  the tangent products ``dA @ B + A @ dB``; at layer 0 the input's tangent is zero: ``9L - 5``.
- Hessian (``jacfwd(jacrev)``, or one reverse pass per row): the gradient once, then ``P`` tangent (or
  reverse) passes of ``6L - 4`` products each: ``3L - 1 + P (6L - 4)``.
- Checkpointing recomputes each layer's forward during the backward pass: ``+L`` products for the
  gradient, ``+2L`` for a double backward (both backward passes recompute).
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

QUANTITIES = ("forward", "gradient", "hvp", "hessian")
#: The full Hessian is built only up to this many parameters (it has P**2 entries).
MAX_HESSIAN_PARAMETERS = 1024

RATIOS = {
    "gradient/forward": (
        "gradient",
        "forward",
        "reverse mode adds two products per layer (y.T @ delta, delta @ W.T) to the forward's one: ~3, "
        "plus 1 when checkpointing recomputes the forward",
    ),
    "hvp/gradient": (
        "hvp",
        "gradient",
        "jvp of grad: each product of the gradient program gains two tangent products: ~3 here, where "
        "products dominate (the brief's tanh loss gets 1.6: its flops are mostly elementwise)",
    ),
    "hessian/hvp": (
        "hessian",
        "hvp",
        "the full Hessian is P = L d**2 tangent (or reverse) passes of 6L - 4 products over one shared "
        "gradient of 3L - 1: about P (6L - 4) / (9L - 5), two thirds of P; the product is the only "
        "form that exists when P is a model's size",
    ),
}


def analytic(
    layers: int,
    batch: int,
    dim: int,
    *,
    checkpoint: bool = False,
    hessian_limit: int = MAX_HESSIAN_PARAMETERS,
) -> dict[str, float | None]:
    """Flops of the matrix products of each program (see the module docstring)."""
    m = 2.0 * batch * dim * dim
    p = layers * dim * dim
    recompute = layers if checkpoint else 0
    return {
        "forward": layers * m,
        "gradient": (3 * layers - 1 + recompute) * m,
        "hvp": (9 * layers - 5 + 2 * recompute) * m,
        "hessian": (3 * layers - 1 + recompute + p * (6 * layers - 4 + recompute)) * m
        if p <= hessian_limit
        else None,
    }


def _inputs(layers: int, batch: int, dim: int):
    rng = np.random.default_rng(0)
    weights = (rng.standard_normal((layers, dim, dim)) / np.sqrt(dim)).astype(np.float32)
    x = rng.standard_normal((batch, dim)).astype(np.float32)
    v = rng.standard_normal((layers, dim, dim)).astype(np.float32)
    return weights, x, v


def jax_counts(
    layers: int, batch: int, dim: int, *, unroll: bool = True, hessian_limit: int = MAX_HESSIAN_PARAMETERS
) -> dict[str, float | None]:
    """XLA's ``cost_analysis()['flops']`` of the compiled programs (the stack with ``jax.checkpoint``).

    ``unroll=True`` unrolls the scan: XLA's cost analysis counts a while loop's body once (it does not
    know the trip count), so the adapter's rolled scan reports about one layer's worth.
    """
    import jax
    import jax.numpy as jnp

    def layer(y, w):
        return jax.nn.relu(y @ w), None

    def loss(weights, x):
        final, _ = jax.lax.scan(jax.checkpoint(layer), x, weights, unroll=unroll or 1)
        return jnp.sum(final**2)

    def hvp(weights, x, v):
        return jax.jvp(lambda w: jax.grad(loss)(w, x), (weights,), (v,))[1]

    weights, x, v = _inputs(layers, batch, dim)
    out = {
        "forward": _xla_flops(loss, weights, x),
        "gradient": _xla_flops(jax.grad(loss), weights, x),
        "hvp": _xla_flops(hvp, weights, x, v),
        "hessian": None,
    }
    if weights.size <= hessian_limit:
        out["hessian"] = _xla_flops(jax.hessian(loss), weights, x)
    return out


def _xla_flops(fn, *args) -> float:
    import jax

    analysis = jax.jit(fn).lower(*args).compile().cost_analysis()
    if isinstance(analysis, list):  # older JAX: one dict per computation
        analysis = analysis[0]
    return float(analysis["flops"])


def torch_counts(
    layers: int, batch: int, dim: int, *, hessian_limit: int = MAX_HESSIAN_PARAMETERS
) -> dict[str, float | None]:
    """``FlopCounterMode`` totals of the torch adapter's own programs (checkpointed layers)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from crosscheck._backends import load_backend

    backend: Any = load_backend("torch")  # the adapter itself: `_loss` and `hvp` are not in the protocol
    weights, x, v = _inputs(layers, batch, dim)

    def count(fn) -> float:
        with FlopCounterMode(display=False) as counter:
            fn()
        return float(counter.get_total_flops())

    def loss(w):
        return backend._loss(w, torch.tensor(x))

    out = {
        "forward": count(lambda: loss(torch.tensor(weights))),
        "gradient": count(lambda: backend.grad(weights, x)),
        "hvp": count(lambda: backend.hvp(weights, x, v)),
        "hessian": None,
    }
    if weights.size <= hessian_limit:
        # One reverse pass over the gradient's graph per row (torch.func.hessian, forward over reverse,
        # warns about torch.jit.script inside torch 2.13; this is the same matrix).
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            out["hessian"] = count(lambda: torch.autograd.functional.hessian(loss, torch.tensor(weights)))
    return out


def cost_table(
    layers: int,
    batch: int,
    dim: int,
    *,
    frameworks: tuple[str, ...] = ("jax", "torch"),
    hessian_limit: int = MAX_HESSIAN_PARAMETERS,
) -> dict:
    """Every count and ratio, as data (the ``--json`` output of ``crosscheck cost``).

    The full Hessian is counted only when ``P = L d**2 <= hessian_limit`` (``None`` otherwise).
    """
    counts: dict[str, Any] = {
        "analytic": analytic(layers, batch, dim, hessian_limit=hessian_limit),
        "analytic, checkpointed": analytic(layers, batch, dim, checkpoint=True, hessian_limit=hessian_limit),
    }
    errors = {}
    for name, fn in (("jax", jax_counts), ("torch", torch_counts)):
        if name not in frameworks:
            continue
        try:
            counts[name] = fn(layers, batch, dim, hessian_limit=hessian_limit)
        except ImportError as exc:
            errors[name] = f"{exc.name or exc} is not installed"
    if "jax" in counts:
        counts["jax, rolled scan"] = jax_counts(layers, batch, dim, unroll=False, hessian_limit=hessian_limit)
    ratios = {
        name: {source: _ratio(c.get(top), c.get(bottom)) for source, c in counts.items()}
        for name, (top, bottom, _) in RATIOS.items()
    }
    return {
        "layers": layers,
        "batch": batch,
        "dim": dim,
        "parameters": layers * dim * dim,
        "counts": counts,
        "ratios": ratios,
        "why": {name: why for name, (_, _, why) in RATIOS.items()},
        "differences": DIFFERENCES,
        "unavailable": errors,
    }


def _ratio(top, bottom):
    return None if top is None or not bottom else top / bottom


DIFFERENCES = [
    "analytic counts only matrix products; torch's FlopCounterMode also counts only matmul-like ops, so "
    "it matches the checkpointed analytic count exactly (checkpointing recomputes the forward: +L "
    "products for the gradient, +2L for the double-backward HVP)",
    "XLA counts elementwise ops too (ReLU, its mask, the square, the sum, the selects of the backward "
    "pass): its forward is the analytic count plus L N d + 2 N d - 1; its HVP counts more than the "
    "same stack as a Python loop under jax.jit (which is close to analytic): most likely a scan's "
    "uniform body multiplies layer 0's zero input tangent, which autograd and a loop skip",
    "XLA's count does not grow with jax.checkpoint here: the compiled program shows no recomputation",
    "a rolled lax.scan (the jax adapter's own program) is a while loop whose body XLA's cost analysis "
    "counts once: its flops are about one layer's, whatever L",
]
