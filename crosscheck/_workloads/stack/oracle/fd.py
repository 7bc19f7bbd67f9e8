"""The stack's finite-difference oracle (backend ``numpy-fd``): float64, an error bar on every entry.

How it works (see README, "The oracle"). With every ReLU mask held fixed, the loss restricted to one
weight ``W[k][i, j]`` is exactly a quadratic, so a central difference whose step crosses no kink has
no truncation error: its only error is rounding, which shrinks as the step grows. The oracle therefore
takes, per entry, the largest step that crosses no kink:

1. It starts from ``min(h_cap, dist / 32)`` (a power of two), where ``h_cap`` is the RMS of the layer's
   weights and ``dist`` the exact distance, along that weight, to the first kink of the layer the weight
   feeds (that layer's pre-activations move linearly with the weight).
2. It evaluates the loss at ``w +- h`` for all entries of a layer at once (reusing the unchanged prefix
   of the stack, and evaluating only the rows of the batch the perturbation changes: see
   ``crosscheck._workloads.stack.oracle.perturb``) and compares every ReLU mask at the perturbed points with
   the base point. The masks being piecewise-linear in ``h``, equal masks at both ends prove that no
   kink was crossed.
3. Entries whose step crossed a kink retry below the nearest kink crossed (its distance is exact, since
   everything moved linearly up to it), down to ``h_cap * 2**-40``. An
   entry that still crosses sits on a kink (an exact zero pre-activation, or one closer than that): its
   value is the derivative of the piece the point belongs to, i.e. the loss evaluated with the masks held
   at the base point, which follows ``jax.nn.relu``'s convention (derivative 0 at 0); the entry is
   flagged with the kink's ``(layer, row, unit)``.

The error bar of each entry bounds rounding, in two terms: the float64 error of the two loss evaluations
divided by the step, and the error of the shared prefix, which moves the point being differentiated
(both sized by the rounding model of ``crosscheck._workloads.stack.rounding``, whose backward pass
serves only to size error bars; the estimate itself comes from loss evaluations alone).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence

import numpy as np

from crosscheck._compare import terms
from crosscheck._workloads.stack import rounding as stack_rounding
from crosscheck._workloads.stack.forward import Forward, backward, forward
from crosscheck._workloads.stack.oracle import parallel as _parallel
from crosscheck._workloads.stack.oracle import perturb as _perturb
from crosscheck._workloads.stack.oracle import shrink as _shrink

__all__ = [
    "OracleEstimate",
    "ScreenEstimate",
    "entries",
    "estimate",
    "screen",
    "smallest_step",
    "step_cap",
    "stuck_distance",
]

#: A step shrinks (``shrink.SHRINK``) down to h_cap * _MIN_STEP_RATIO.
_MIN_STEP_RATIO = 2.0**-40


@dataclasses.dataclass(frozen=True)
class OracleEstimate:
    """The oracle's answer.

    Attributes:
        value: the gradient estimate, ``(L, d, d)`` float64.
        error: a bound on ``|value - exact|`` per entry.
        step: the step used per entry.
        kink: ``(L, d, d)`` bool: no step avoided a kink, so the piece's derivative was taken.
        kink_at: ``(L, d, d, 3)``: for those entries, the kink ``(layer, row, unit)`` crossed (-1 elsewhere).
        evaluations: how many perturbed loss evaluations were made.
        rounding: the float64 rounding model that sized the error bars (a judge reuses it).
    """

    value: np.ndarray
    error: np.ndarray
    step: np.ndarray
    kink: np.ndarray
    kink_at: np.ndarray
    evaluations: int
    rounding: stack_rounding.RoundingModel | None = None


@dataclasses.dataclass(frozen=True)
class ScreenEstimate:
    """Directional derivatives of the loss: ``value[k, s]`` estimates ``sum(grad[k] * directions[k, s])``.

    Attributes:
        directions: ``(L, S, d, d)``.
        value, error: ``(L, S)``: estimates and error bounds.
        kink: ``(L, S)``: no step avoided a kink, so the piece's derivative was taken.
        evaluations: how many perturbed loss evaluations were made.
        rounding: the float64 rounding model (with ``direction_sigma``) that sized the error bars.
    """

    directions: np.ndarray
    value: np.ndarray
    error: np.ndarray
    kink: np.ndarray
    evaluations: int
    rounding: stack_rounding.RoundingModel | None = None


@_parallel.blas_on_one_thread
def estimate(
    weights: np.ndarray,
    x: np.ndarray,
    *,
    layers: Sequence[int] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> OracleEstimate:
    """Estimate the gradient of the stack with an error bound per entry.

    Args:
        weights: ``(L, d, d)`` float array (not modified).
        x: ``(N, d)`` float array (not modified).
        layers: estimate only these layers (the others are NaN); default all.
        progress: called as ``progress(done, total)`` in units of perturbed entries.
    """
    fwd = forward(weights, x)
    shape = fwd.weights.shape
    layers = range(shape[0]) if layers is None else sorted(set(layers))
    out = {
        "value": np.full(shape, np.nan),
        "error": np.full(shape, np.nan),
        "step": np.full(shape, np.nan),
        "kink": np.zeros(shape, bool),
        "kink_at": np.full(shape + (3,), -1, np.int64),
    }
    total, done, evaluations = len(layers) * shape[1] * shape[2], 0, 0
    sigmas = _perturb.output_sigmas(fwd)
    # Entries are independent: each layer in a few row blocks, earlier (costlier) layers first.
    d = shape[1]
    split = min(d, _parallel.workers()) if d >= _parallel.MIN_PARALLEL_WIDTH else 1  # else serial
    blocks = [(k, rows) for k in layers for rows in np.array_split(np.arange(d), split)]
    flops = 2.0 * len(layers) * x.shape[0] * d**4  # about what the layers' perturbed products cost
    # The loss evaluations share the rounded prefix of the stack, so the estimate is the derivative
    # at a point moved by float64 rounding; that error is sized by the stack's rounding model, made on
    # the other core while the layers run serially.
    deltas, _ = backward(fwd, grads=False)

    def layer(block):
        k, rows = block
        return _layer(fwd, k, rows, out, sigmas[k])

    def model():
        return stack_rounding.rounding_model(fwd, deltas, "float64")

    with _parallel.beside(model, width=d, flops=stack_rounding.rounding_flops(fwd)) as rounded:
        for count, size in _parallel.in_parallel(layer, blocks, flops=flops, width=d):
            evaluations += count
            done += size
            if progress is not None:
                progress(done, total)
        rounding = rounded()
    out["error"] += rounding.grad_bound
    return OracleEstimate(**out, evaluations=evaluations, rounding=rounding)


@_parallel.blas_on_one_thread
def entries(
    weights: np.ndarray,
    x: np.ndarray,
    index: np.ndarray,
    *,
    rounding: stack_rounding.RoundingModel | None = None,
) -> OracleEstimate:
    """``estimate`` at the entries ``index`` alone (``(S, 3)``: ``(layer, row, col)``): each field of
    the answer is that entry's, ``(S,)`` (``kink_at``: ``(S, 3)``), by the same kink-aware central
    difference, a layer's entries at a time.

    Args:
        weights: ``(L, d, d)``; x: ``(N, d)`` (not modified).
        index: the entries, ``(S, 3)`` integers.
        rounding: this point's float64 rounding model (its ``grad_sigma``), which sizes the shared
            prefix's part of each error bar as ``estimate``'s; made here when not given.
    """
    fwd = forward(weights, x)
    index = np.asarray(index, np.int64).reshape(-1, 3)
    size = len(index)
    out = {
        "value": np.full(size, np.nan),
        "error": np.full(size, np.nan),
        "step": np.full(size, np.nan),
        "kink": np.zeros(size, bool),
        "kink_at": np.full((size, 3), -1, np.int64),
    }
    sigmas, evaluations = _perturb.output_sigmas(fwd), 0
    for k in (int(v) for v in np.unique(index[:, 0])):
        at = np.flatnonzero(index[:, 0] == k)
        rows, cols = index[at, 1], index[at, 2]
        y, z = fwd.ys[k], fwd.zs[k]

        def central(which, h, frozen, k=k, rows=rows, cols=cols):
            return _perturb.central(fwd, k, h, frozen, sigmas[k], rows=rows[which], cols=cols[which])

        with np.errstate(divide="ignore", invalid="ignore"):  # ``_distance_to_first_kink``'s, per entry
            ratio = np.where(y[:, rows] != 0, np.abs(z[:, cols]) / np.abs(y[:, rows]), np.inf)
        result = _differentiate(fwd, k, ratio.min(axis=0), central)
        for name in ("value", "error", "step", "kink", "kink_at"):
            out[name][at] = result[name]
        for flat in np.flatnonzero((result["kink_at"][:, 0] < 0) & result["kink"]):
            out["kink_at"][at[flat]] = (k, *_exact_zero_at(y, z, int(rows[flat]), int(cols[flat])))
        evaluations += result["evaluations"]
    if rounding is None:
        rounding = stack_rounding.rounding_model(fwd, backward(fwd, grads=False)[0], "float64")
    out["error"] += terms.modelled(rounding.grad_sigma[tuple(index.T)])
    return OracleEstimate(**out, evaluations=evaluations, rounding=rounding)


@_parallel.blas_on_one_thread
def screen(
    weights: np.ndarray,
    x: np.ndarray,
    directions: np.ndarray,
    *,
    progress: Callable[[int, int], None] | None = None,
    keep_model: bool = True,
) -> ScreenEstimate:
    """Directional derivatives ``sum(grad[k] * directions[k, s])``, each with an error bound.

    Perturbing one layer along a direction moves its pre-activations linearly and, with the masks
    held, the loss along the direction is again exactly a quadratic: the same kink-aware central
    difference applies, at the cost of two loss evaluations per direction instead of per entry.

    Args:
        weights: ``(L, d, d)``; x: ``(N, d)`` (not modified).
        directions: ``(L, S, d, d)``: ``S`` directions per layer (any real dtype: int8 signs are
            taken in float64 a layer at a time).
        progress: called as ``progress(done, total)`` in units of directions.
        keep_model: also model every entry's rounding (and return the model, for a judge to reuse);
            False when only these derivatives are needed (the HVP's screening, at each of its nodes).
    """
    fwd = forward(weights, x)
    n_layers, count = directions.shape[:2]
    value, error, kink = (
        np.zeros((n_layers, count)),
        np.zeros((n_layers, count)),
        np.zeros((n_layers, count), bool),
    )
    evaluations, sigmas = 0, _perturb.output_sigmas(fwd)
    for k in range(n_layers):
        moved = fwd.ys[k] @ directions[k].astype(np.float64)  # how each z[k] moves per unit step
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(moved != 0, np.abs(fwd.zs[k]) / np.abs(moved), np.inf)
        distance = ratio.reshape(count, -1).min(axis=1)

        def central(index, h, frozen, k=k, moved=moved):
            return _perturb.central(fwd, k, h, frozen, sigmas[k], moved=moved[index])

        result = _differentiate(fwd, k, distance, central)
        value[k], error[k], kink[k] = result["value"], result["error"], result["kink"]
        evaluations += result["evaluations"]
        if progress is not None:
            progress((k + 1) * count, n_layers * count)
    deltas, _ = backward(fwd, grads=False)
    model = stack_rounding.rounding_model(fwd, deltas, "float64", directions=directions, entries=keep_model)
    assert model.direction_sigma is not None  # the model was given the directions
    error += terms.modelled(model.direction_sigma)
    return ScreenEstimate(directions, value, error, kink, evaluations, model if keep_model else None)


def _layer(fwd: Forward, k: int, block: np.ndarray, out: dict[str, np.ndarray], sigma: float):
    """Fill ``out[...][k][block]`` (rows ``block`` of layer ``k``'s weights, every column); return the
    number of loss evaluations and of entries. ``sigma``: the float64 rounding of ``y[L]`` made by
    layers ``k`` on (``perturb.output_sigmas``)."""
    y, z = fwd.ys[k], fwd.zs[k]
    d = y.shape[1]
    rows, cols = np.repeat(block, d), np.tile(np.arange(d), len(block))

    def central(index, h, frozen):
        return _perturb.central(fwd, k, h, frozen, sigma, rows=rows[index], cols=cols[index])

    result = _differentiate(fwd, k, _distance_to_first_kink(y[:, block], z).ravel(), central)
    for name in ("value", "error", "step", "kink"):
        out[name][k][block] = result[name].reshape(len(block), d)
    out["kink_at"][k][block] = result["kink_at"].reshape(len(block), d, 3)
    # Entries too close to a kink of the layer the weight feeds for any step: that kink is the one.
    for flat in np.flatnonzero((result["kink_at"][:, 0] < 0) & result["kink"]):
        out["kink_at"][k][rows[flat], cols[flat]] = (k, *_exact_zero_at(y, z, rows[flat], cols[flat]))
    return result["evaluations"], rows.size


def step_cap(rms: float) -> float:
    """The largest step ``_differentiate`` takes for values of root mean square ``rms``: its power of
    two at or below (1 for ``rms == 0``)."""
    return 2.0 ** math.floor(math.log2(rms)) if rms > 0 else 1.0


def smallest_step(rms: float) -> float:
    """The smallest step ``_differentiate`` takes for values of root mean square ``rms``: a
    perturbation that crosses a kink even at it sits on the kink, and takes its piece's derivative."""
    return step_cap(rms) * _MIN_STEP_RATIO


def stuck_distance(rms: float) -> float:
    """The distance to a kink below which ``_differentiate`` tries no step (its first step, a power of
    two at or below ``distance / 32``, is under ``smallest_step``)."""
    return smallest_step(rms) * 32


def _differentiate(fwd: Forward, k: int, distance: np.ndarray, central) -> dict:
    """Kink-aware central differences of ``len(distance)`` perturbations of layer ``k``.

    ``distance[s]`` is how far perturbation ``s`` can go before a pre-activation of layer ``k`` changes
    sign; ``central(index, h, frozen)`` evaluates perturbations ``index`` with steps ``h``.
    """
    rms = float(np.sqrt(np.mean(fwd.weights[k] ** 2)))
    h_cap = step_cap(rms)
    # Later layers' kinks are unknown until evaluated: a step well inside the first layer's distance
    # crosses them rarely (fewer retries, ~1.1 evaluations per entry) at a small cost in rounding.
    step = np.minimum(h_cap, distance / 32)
    with np.errstate(divide="ignore"):
        step = np.where(step > 0, 2.0 ** np.floor(np.log2(step)), 0.0)

    def attempt(todo: np.ndarray, h: np.ndarray) -> _shrink.Attempt:
        value, error, crossed, at, fraction = central(todo, h, False)

        def again(hit: np.ndarray) -> np.ndarray:
            # Below the first kink crossed (its distance is exact), by at least SHRINK.
            shrink = np.minimum(_shrink.SHRINK, fraction[hit] / 2)
            with np.errstate(divide="ignore"):
                return 2.0 ** np.floor(np.log2(h[hit] * shrink))

        return _shrink.Attempt(value, error, crossed, at, h, again)

    def held(stuck: np.ndarray, h: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        value, error, *_ = central(stuck, h, True)
        return value, error

    return _shrink.differences(step, h_cap * _MIN_STEP_RATIO, h_cap, attempt, held)


def _exact_zero_at(y: np.ndarray, z: np.ndarray, i: int, j: int) -> tuple[int, int]:
    """The (row, unit) of the pre-activation nearest to its kink along ``W[i, j]`` (layer ``k``)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(y[:, i] != 0, np.abs(z[:, j]) / np.abs(y[:, i]), np.inf)
    return int(np.argmin(ratio)), j


def _distance_to_first_kink(y: np.ndarray, z: np.ndarray) -> np.ndarray:
    """``dist[i, j]``: how far ``W[i, j]`` can move before some ``z[n, j]`` changes sign."""
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.abs(z)[:, None, :] / np.abs(y)[:, :, None]
    ratio[np.broadcast_to((y == 0)[:, :, None], ratio.shape)] = np.inf
    return ratio.min(axis=0)
