"""The stack's finite-difference oracle (backend ``numpy-fd``): float64, an error bar on every entry.

How it works (see README, "The oracle"). With every ReLU mask held fixed, the loss restricted to one
weight ``W[k][i, j]`` is exactly a quadratic, so a central difference whose step crosses no kink has
no truncation error: its only error is rounding, which shrinks as the step grows. The oracle therefore
takes, per entry, the largest step that crosses no kink:

1. It starts from ``min(h_cap, dist / 32)`` (a power of two), where ``h_cap`` is the RMS of the layer's
   weights and ``dist`` the exact distance, along that weight, to the first kink of the layer the weight
   feeds (that layer's pre-activations move linearly with the weight).
2. It evaluates the loss at ``w +- h`` for all entries of a layer at once (reusing the unchanged prefix
   of the stack) and compares every ReLU mask at the perturbed points with the base point. The masks
   being piecewise-linear in ``h``, equal masks at both ends prove that no kink was crossed.
3. Entries whose step crossed a kink retry below the nearest kink crossed (its distance is exact, since
   everything moved linearly up to it), down to ``h_cap * 2**-40``. An
   entry that still crosses sits on a kink (an exact zero pre-activation, or one closer than that): its
   value is the derivative of the piece the point belongs to, i.e. the loss evaluated with the masks held
   at the base point, which follows ``jax.nn.relu``'s convention (derivative 0 at 0); the entry is
   flagged with the kink's ``(layer, row, unit)``.

The error bar of each entry bounds rounding, in two terms: the float64 error of the two loss evaluations
divided by the step, and the error of the shared prefix, which moves the point being differentiated
(both sized by the rounding model of ``crosscheck._workloads.stack.model``, whose backward pass
serves only to size error bars; the estimate itself comes from loss evaluations alone).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from crosscheck._workloads.stack import model as _stack

__all__ = ["OracleEstimate", "ScreenEstimate", "estimate", "screen"]

#: Entries of one perturbed batch (2 * S * N * d float64 values), sized to stay cache-friendly.
_CHUNK_VALUES = 1 << 18
#: After a crossing a step shrinks at least by this factor, down to h_cap * _MIN_STEP_RATIO.
_SHRINK, _MIN_STEP_RATIO = 0.25, 2.0**-40


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
    """

    value: np.ndarray
    error: np.ndarray
    step: np.ndarray
    kink: np.ndarray
    kink_at: np.ndarray
    evaluations: int


@dataclasses.dataclass(frozen=True)
class ScreenEstimate:
    """Directional derivatives of the loss: ``value[k, s]`` estimates ``sum(grad[k] * directions[k, s])``.

    Attributes:
        directions: ``(L, S, d, d)``.
        value, error: ``(L, S)``: estimates and error bounds.
        kink: ``(L, S)``: no step avoided a kink, so the piece's derivative was taken.
        evaluations: how many perturbed loss evaluations were made.
    """

    directions: np.ndarray
    value: np.ndarray
    error: np.ndarray
    kink: np.ndarray
    evaluations: int


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
    fwd = _stack.forward(weights, x)
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
    for k in layers:
        evaluations += _layer(fwd, k, out)
        done += shape[1] * shape[2]
        if progress is not None:
            progress(done, total)
    # The loss evaluations share the rounded prefix of the stack, so the estimate is the derivative
    # at a point moved by float64 rounding; that error is sized by the stack's rounding model.
    deltas, _ = _stack.backward(fwd)
    out["error"] += _stack.rounding_model(fwd, deltas, "float64").grad_bound
    return OracleEstimate(**out, evaluations=evaluations)


def screen(
    weights: np.ndarray,
    x: np.ndarray,
    directions: np.ndarray,
    *,
    progress: Callable[[int, int], None] | None = None,
) -> ScreenEstimate:
    """Directional derivatives ``sum(grad[k] * directions[k, s])``, each with an error bound.

    Perturbing one layer along a direction moves its pre-activations linearly and, with the masks
    held, the loss along the direction is again exactly a quadratic: the same kink-aware central
    difference applies, at the cost of two loss evaluations per direction instead of per entry.

    Args:
        weights: ``(L, d, d)``; x: ``(N, d)`` (not modified).
        directions: ``(L, S, d, d)``: ``S`` directions per layer.
        progress: called as ``progress(done, total)`` in units of directions.
    """
    fwd = _stack.forward(weights, x)
    n_layers, count = directions.shape[:2]
    value, error, kink = (
        np.zeros((n_layers, count)),
        np.zeros((n_layers, count)),
        np.zeros((n_layers, count), bool),
    )
    evaluations = 0
    for k in range(n_layers):
        moved = fwd.ys[k] @ directions[k]
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(moved != 0, np.abs(fwd.zs[k]) / np.abs(moved), np.inf)
        distance = ratio.reshape(count, -1).min(axis=1)

        def central(index, h, frozen, k=k):
            return _central(fwd, k, h, frozen, directions=directions[k][index])

        result = _differentiate(fwd, k, distance, central)
        value[k], error[k], kink[k] = result["value"], result["error"], result["kink"]
        evaluations += result["evaluations"]
        if progress is not None:
            progress((k + 1) * count, n_layers * count)
    deltas, _ = _stack.backward(fwd)
    model = _stack.rounding_model(fwd, deltas, "float64", directions=directions)
    assert model.direction_sigma is not None  # the model was given the directions
    error += _stack.SAFETY * model.direction_sigma
    return ScreenEstimate(directions, value, error, kink, evaluations)


def _layer(fwd: _stack.Forward, k: int, out: dict[str, np.ndarray]) -> int:
    """Fill ``out[...][k]`` for every entry of layer ``k``; return the number of loss evaluations."""
    y, z = fwd.ys[k], fwd.zs[k]
    d = y.shape[1]
    rows, cols = np.divmod(np.arange(d * d), d)

    def central(index, h, frozen):
        return _central(fwd, k, h, frozen, rows=rows[index], cols=cols[index])

    result = _differentiate(fwd, k, _distance_to_first_kink(y, z).ravel(), central)
    for name in ("value", "error", "step", "kink"):
        out[name][k] = result[name].reshape(d, d)
    out["kink_at"][k] = result["kink_at"].reshape(d, d, 3)
    # Entries too close to a kink of the layer the weight feeds for any step: that kink is the one.
    for flat in np.flatnonzero((result["kink_at"][:, 0] < 0) & result["kink"]):
        out["kink_at"][k].reshape(-1, 3)[flat] = (k, *_exact_zero_at(y, z, *divmod(int(flat), d)))
    return result["evaluations"]


def _differentiate(fwd: _stack.Forward, k: int, distance: np.ndarray, central) -> dict:
    """Kink-aware central differences of ``len(distance)`` perturbations of layer ``k``.

    ``distance[s]`` is how far perturbation ``s`` can go before a pre-activation of layer ``k`` changes
    sign; ``central(index, h, frozen)`` evaluates perturbations ``index`` with steps ``h``.
    """
    rms = float(np.sqrt(np.mean(fwd.weights[k] ** 2)))
    h_cap = 2.0 ** math.floor(math.log2(rms)) if rms > 0 else 1.0
    count = len(distance)
    # Later layers' kinks are unknown until evaluated: a step well inside the first layer's distance
    # crosses them rarely (fewer retries, ~1.1 evaluations per entry) at a small cost in rounding.
    step = np.minimum(h_cap, distance / 32)
    with np.errstate(divide="ignore"):
        step = np.where(step > 0, 2.0 ** np.floor(np.log2(step)), 0.0)
    out: dict[str, Any] = {
        "value": np.zeros(count),
        "error": np.zeros(count),
        "step": np.zeros(count),
        "kink": np.zeros(count, bool),
        "kink_at": np.full((count, 3), -1, np.int64),
    }
    pending, evaluations = np.ones(count, bool), 0
    while True:
        todo = np.flatnonzero(pending & (step >= h_cap * _MIN_STEP_RATIO))
        if todo.size == 0:
            break
        value, error, crossed, at, fraction = central(todo, step[todo], False)
        evaluations += 2 * todo.size
        ok = todo[~crossed]
        out["value"][ok], out["error"][ok], out["step"][ok] = value[~crossed], error[~crossed], step[ok]
        pending[ok] = False
        out["kink_at"][todo[crossed]] = at[crossed]
        # Retry below the first kink crossed (its distance is exact), by at least _SHRINK, and once at
        # the smallest step before giving up (the kink reported is then the one nearest to the point).
        again = todo[crossed]
        shrink = np.minimum(_SHRINK, fraction[crossed] / 2)
        with np.errstate(divide="ignore"):
            shrunk = 2.0 ** np.floor(np.log2(step[again] * shrink))
        smallest = h_cap * _MIN_STEP_RATIO
        step[again] = np.where(step[again] > smallest, np.maximum(shrunk, smallest), 0.0)
    stuck = np.flatnonzero(pending)
    if stuck.size:
        # On (or closer than the smallest step to) a kink: take the derivative of the base point's piece.
        h = np.full(stuck.size, h_cap)
        value, error, *_ = central(stuck, h, True)
        evaluations += 2 * stuck.size
        out["value"][stuck], out["error"][stuck], out["step"][stuck] = value, error, h
        out["kink"][stuck] = True
    out["kink_at"][~out["kink"]] = -1
    out["evaluations"] = evaluations
    return out


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


def _float64_output_sigma(fwd: _stack.Forward, k: int) -> float:
    """Norm of the float64 rounding error of ``y[L]`` made by layers ``k`` onwards (a variance bound:
    each layer's fresh rounding, propagated through ``W**2``, which can only overestimate it)."""
    u = _stack.UNIT_ROUNDOFF["float64"]
    var: Any = 0.0  # then an (N, d) array
    for m in range(k, len(fwd.zs)):
        var = var @ (fwd.weights[m] ** 2) if m > k else 0.0
        var = (var + _stack.fresh_sigma(fwd.ys[m], fwd.weights[m], u, False) ** 2) * fwd.masks[m]
    return float(np.sqrt(np.sum(var)))


def _central(fwd, k, h, frozen, *, rows=None, cols=None, directions=None):
    """Central differences of perturbations of layer ``k`` with steps ``h[s]``: of the entries
    ``(k, rows[s], cols[s])``, or along ``directions[s]`` (``(S, d, d)`` arrays).

    Returns ``(value, error, crossed, where, fraction)``: the estimates, their error bounds, whether a
    mask changed at either end, the first changed mask's ``(layer, row, unit)``, and the fraction of the
    step at which the first kink lies.
    """
    n, d = fwd.zs[k].shape
    sigma = _float64_output_sigma(fwd, k)
    per_chunk = max(1, _CHUNK_VALUES // (2 * n * d))
    # Buffers reused by every chunk: fresh large temporaries each layer cost page faults (glibc returns
    # freed multi-MiB blocks to the OS), which took ~40% of the run time at d=64.
    shape = (2 * min(per_chunk, len(h)), n, d)
    work = np.empty(shape), np.empty(shape), np.empty(shape, bool)
    parts = []
    for start in range(0, len(h), per_chunk):
        part = slice(start, start + per_chunk)
        steps = np.concatenate([h[part], -h[part]])
        if directions is None:
            both = np.tile(rows[part], 2), np.tile(cols[part], 2)
            losses, crossed, where, fraction = _entry_losses(fwd, k, *both, steps, frozen, work)
        else:
            moved = fwd.ys[k] @ directions[part]
            z = work[0][: len(steps)]
            np.multiply(steps[:, None, None], np.concatenate([moved, moved]), out=z)
            z += fwd.zs[k]
            losses, crossed, where, fraction = _propagate(fwd, k, z, frozen, work)
        half = len(h[part])
        parts.append(
            (
                *_finish(fwd, losses, h[part], sigma, crossed, where),
                np.minimum(fraction[:half], fraction[half:]),
            )
        )
    return tuple(np.concatenate(p) for p in zip(*parts, strict=True))


def _entry_losses(fwd, k, rows, cols, steps, frozen, work):
    """Losses at ``W[k][rows, cols] + steps``, reusing everything that does not change.

    Only column j of ``z[k]`` depends on ``W[k][i, j]``, and linearly (``+= h * y[k][:, i]``); so only
    column j of ``y[k + 1]`` changes, and ``z[k + 1]`` changes by a rank-one term. The sums are the same
    as a full evaluation's, in exact arithmetic; only the unchanged parts are not recomputed.
    """
    count = len(steps)
    column = fwd.zs[k][:, cols].T + steps[:, None] * fwd.ys[k][:, rows].T  # (2S, N)
    base = fwd.masks[k][:, cols].T
    crossed = np.zeros(count, bool)
    where = np.full((count, 3), -1, np.int64)
    fraction = np.ones(count)
    if frozen:
        new_column = column * base
    else:
        changed = (column > 0) != base
        crossed = changed.any(axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            nearest = np.where(
                changed, np.abs(fwd.zs[k][:, cols].T) / np.abs(column - fwd.zs[k][:, cols].T), np.inf
            ).argmin(axis=1)
        where[crossed] = np.column_stack([np.full(int(crossed.sum()), k), nearest[crossed], cols[crossed]])
        new_column = np.maximum(column, 0.0)
    old_column = fwd.ys[k + 1][:, cols].T
    if k + 1 == len(fwd.zs):
        losses = fwd.loss + np.einsum("sn,sn->s", new_column, new_column) - np.sum(old_column**2, axis=1)
        return losses, crossed, where, fraction
    z = work[0][:count]
    np.multiply((new_column - old_column)[:, :, None], fwd.weights[k + 1][cols][:, None, :], out=z)
    z += fwd.zs[k + 1]
    losses, more, at, later = _propagate(fwd, k + 1, z, frozen, work)
    # A crossing in layer k is already known (the step is below the exact distance to it): shrink.
    fraction = np.where(crossed, 0.5, later)
    return losses, crossed | more, np.where(crossed[:, None], where, at), fraction


def _propagate(fwd, k, z, frozen, work):
    """Finish a batch of perturbed forward passes from the pre-activations ``z`` of layer ``k``.

    ``z`` is a view of ``work[0]``; ``work`` holds two float buffers and a bool one of at least its size.

    Returns the losses, whether any mask changed, the first changed mask's ``(layer, row, unit)`` and,
    where one changed, the fraction of the step at which the first kink lies.
    """
    count, _, d = z.shape
    spare = work[1][:count]  # z lives in work[0]; products alternate between the two
    crossed = np.zeros(count, bool)
    where = np.full((count, 3), -1, np.int64)
    fraction = np.ones(count)
    for m in range(k, len(fwd.zs)):
        if m > k:
            # One tall product rather than a batch of small ones: BLAS is far faster on it.
            np.matmul(z.reshape(-1, d), fwd.weights[m], out=spare.reshape(-1, d))
            z, spare = spare, z
        base = fwd.masks[m]
        if frozen:
            z *= base
            continue
        changed = np.greater(z, 0, out=work[2][:count])
        np.not_equal(changed, base, out=changed)
        new = changed.reshape(count, -1).any(axis=1) & ~crossed
        if new.any():
            # Up to the first layer that crossed, everything moved linearly with the step: the fraction
            # of the step at which each of its kinks lies is exact; the nearest is the one to report.
            moved = np.abs(z[new] - fwd.zs[m])
            with np.errstate(divide="ignore", invalid="ignore"):
                ratio = np.where(changed[new], np.abs(fwd.zs[m]) / moved, np.inf)
            ratio = ratio.reshape(int(new.sum()), -1)
            nearest = ratio.argmin(axis=1)
            where[new] = np.column_stack([np.full(nearest.size, m), *np.divmod(nearest, d)])
            fraction[new] = ratio[np.arange(nearest.size), nearest]
            crossed |= new
        np.maximum(z, 0.0, out=z)
    return np.einsum("snd,snd->s", z, z), crossed, where, fraction


def _finish(fwd, losses, h, sigma, crossed, where):
    """Central differences from the losses at ``+h`` (first half) and ``-h`` (second half)."""
    s = len(h)
    plus, minus = losses[:s], losses[s:]
    value = (plus - minus) / (2 * h)
    u = _stack.UNIT_ROUNDOFF["float64"]
    n_terms = fwd.ys[-1].size
    # Each loss is off by at most 2 * sqrt(loss) * ||error of y[L]|| (Cauchy-Schwarz) plus its own sum
    # (worst case, (n - 1) * u * loss). The error of y[L] was modelled at the base point; it scales with
    # the size of y[L], which a large step changes: hence the factor sqrt(loss / base loss).
    base = fwd.loss
    losses = np.maximum(losses, 0.0)
    grow = np.sqrt(np.maximum(losses / base, 1.0)) if base > 0 else 1.0
    loss_error = _stack.SAFETY * 2 * np.sqrt(losses) * sigma * grow + u * n_terms * (losses + base)
    error = (loss_error[:s] + loss_error[s:]) / (2 * h) + 4 * u * np.abs(value)
    kinked = crossed[:s] | crossed[s:]
    where_first = np.where(crossed[:s, None], where[:s], where[s:])
    return value, error, kinked, where_first
