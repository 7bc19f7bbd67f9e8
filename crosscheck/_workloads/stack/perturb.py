"""Batched perturbed forward passes of the stack: the loss evaluations behind the oracle (``fd``)."""

from __future__ import annotations

from typing import Any

import numpy as np

from crosscheck._workloads.stack import model as _stack

#: Entries of one perturbed batch (2 * S * N * d float64 values), sized to stay cache-friendly.
_CHUNK_VALUES = 1 << 18


def _float64_output_sigma(fwd: _stack.Forward, k: int) -> float:
    """Norm of the float64 rounding error of ``y[L]`` made by layers ``k`` onwards (a variance bound:
    each layer's fresh rounding, propagated through ``W**2``, which can only overestimate it)."""
    u = _stack.UNIT_ROUNDOFF["float64"]
    var: Any = 0.0  # then an (N, d) array
    for m in range(k, len(fwd.zs)):
        var = var @ (fwd.weights[m] ** 2) if m > k else 0.0
        var = (var + _stack.fresh_sigma(fwd.ys[m], fwd.weights[m], u, False) ** 2) * fwd.masks[m]
    return float(np.sqrt(np.sum(var)))


def central(fwd, k, h, frozen, *, rows=None, cols=None, directions=None):
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
