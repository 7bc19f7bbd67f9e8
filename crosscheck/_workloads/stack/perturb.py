"""Batched perturbed forward passes of the stack: the loss evaluations behind the oracle (``fd``).

Only the rows a perturbation changes are evaluated. The loss is a sum over the rows of the batch and
each row's forward pass is separate, so a row that a perturbation leaves unchanged contributes the
same to the losses at ``+h`` and ``-h`` and nothing to their difference. Perturbing ``W[k][i, j]``
moves ``z[k][n, j]`` by ``h * y[k][n, i]``: a row with ``y[k][n, i] == 0`` does not move, nor does a
row whose unit ``(k, n, j)`` is off and stays off (its ReLU output stays 0), so only about a quarter of
the rows of a ReLU layer are evaluated. The difference is computed from the changed rows' own terms
(``sum(y[L][n] ** 2)`` perturbed minus unperturbed), which is the same sum as a full evaluation's in
exact arithmetic and never less accurate. The changed rows of every perturbation of a chunk are
stacked into one tall matrix, so each later layer is one BLAS product.
"""

from __future__ import annotations

import numpy as np

from crosscheck._workloads.stack import model as _stack

#: Values of one propagated block (rows * d float64 values), sized to stay cache-friendly.
_CHUNK_VALUES = 1 << 17


def output_sigmas(fwd: _stack.Forward) -> list[float]:
    """For each layer ``k``, the norm of the float64 rounding error of ``y[L]`` made by layers ``k``
    onwards: a variance bound, each layer's fresh rounding propagated through ``W**2`` (which can only
    overestimate it) and summed over ``y[L]``.

    The sum is linear in each layer's fresh variance ``f[m]``, so it is ``sum_{m >= k} <f[m], a[m]>``
    with ``a[L-1] = 1`` and ``a[m] = (a[m+1] * mask[m+1]) @ (W[m+1]**2).T``: one backward pass serves
    every ``k``, instead of propagating forward from each ``k``.
    """
    u = _stack.UNIT_ROUNDOFF["float64"]
    n_layers = len(fwd.zs)
    adjoint = np.ones_like(fwd.zs[-1])
    total, sums = 0.0, [0.0] * n_layers
    for m in reversed(range(n_layers)):
        if m < n_layers - 1:
            adjoint = (adjoint * fwd.masks[m + 1]) @ fwd.squared_weights[m + 1].T
        sigma = _stack.fresh_sigma(fwd.ys[m], fwd.weights[m], u, False, fwd.squared_weights[m])
        fresh = np.square(sigma) * fwd.masks[m]
        total += float(np.sum(fresh * adjoint))
        sums[m] = total
    return [float(np.sqrt(v)) for v in sums]


def central(fwd, k, h, frozen, sigma, *, rows=None, cols=None, moved=None):
    """Central differences of perturbations of layer ``k`` with steps ``h[s]``: of the entries
    ``(k, rows[s], cols[s])``, or along directions ``D[s]``, given as ``moved[s] = y[k] @ D[s]`` (how
    ``z[k]`` moves per unit step, ``(S, N, d)``). ``sigma`` is ``output_sigmas(fwd)[k]``.

    Returns ``(value, error, crossed, where, fraction)``: the estimates, their error bounds, whether a
    mask changed at either end, the first changed mask's ``(layer, row, unit)``, and the fraction of the
    step at which the first kink lies.
    """
    steps = np.concatenate([h, -h])
    if moved is None:
        rows, cols = np.tile(rows, 2), np.tile(cols, 2)
        change, crossed, where, fraction = _entry_rows(fwd, k, rows, cols, steps, frozen)
    else:
        change, crossed, where, fraction = _direction_rows(fwd, k, moved, steps, frozen)
    half = len(h)
    return (
        *_finish(fwd, change, h, sigma, crossed, where),
        np.minimum(fraction[:half], fraction[half:]),
    )


def _entry_rows(fwd, k, rows, cols, steps, frozen):
    """Loss changes at ``W[k][rows, cols] + steps``, from the rows each perturbation changes.

    Only column j of ``z[k]`` depends on ``W[k][i, j]``, and linearly (``+= h * y[k][:, i]``); so only
    column j of ``y[k + 1]`` changes, and ``z[k + 1]`` changes by a rank-one term, in the rows whose
    ``y[k + 1][n, j]`` moved. The sums are the same as a full evaluation's, in exact arithmetic; only the
    unchanged parts are not recomputed.
    """
    count = len(steps)
    z_col = fwd.zs[k][:, cols].T
    column = z_col + steps[:, None] * fwd.ys[k][:, rows].T  # (2S, N)
    base = fwd.masks[k][:, cols].T
    crossed = np.zeros(count, bool)
    where = np.full((count, 3), -1, np.int64)
    if frozen:
        new_column = column * base
    else:
        changed = (column > 0) != base
        crossed = changed.any(axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            nearest = np.where(changed, np.abs(z_col) / np.abs(column - z_col), np.inf).argmin(axis=1)
        where[crossed] = np.column_stack([np.full(int(crossed.sum()), k), nearest[crossed], cols[crossed]])
        new_column = np.maximum(column, 0.0)
    old_column = fwd.ys[k + 1][:, cols].T
    if k + 1 == len(fwd.zs):
        change = np.einsum("sn,sn->s", new_column, new_column) - np.einsum("sn,sn->s", old_column, old_column)
        return change, crossed, where, np.ones(count)
    moved = new_column - old_column
    which, row_of = np.nonzero(moved)

    def start(part: slice, z: np.ndarray, spare: np.ndarray) -> None:
        s, n = which[part], row_of[part]
        np.take(fwd.weights[k + 1], cols[s], axis=0, out=z, mode="clip")
        z *= moved[s, n][:, None]
        z += np.take(fwd.zs[k + 1], n, axis=0, out=spare, mode="clip")

    change, more, at, later = _rows(fwd, k + 1, start, which, row_of, count, frozen)
    # A crossing in layer k is already known (the step is below the exact distance to it): shrink.
    fraction = np.where(crossed, 0.5, later)
    return change, crossed | more, np.where(crossed[:, None], where, at), fraction


def _direction_rows(fwd, k, moved, steps, frozen):
    """Loss changes along ``steps[s] * D[s % S]`` (layer ``k``, ``moved = y[k] @ D``), from the rows
    that move."""
    count, n_dirs = len(steps), len(moved)
    live = np.tile(np.any(moved != 0, axis=2), (2, 1))  # (2S, N)
    which, row_of = np.nonzero(live)

    def start(part: slice, z: np.ndarray, spare: np.ndarray) -> None:
        s, n = which[part], row_of[part]
        np.multiply(steps[s][:, None], moved[s % n_dirs, n], out=z)
        z += np.take(fwd.zs[k], n, axis=0, out=spare, mode="clip")

    return _rows(fwd, k, start, which, row_of, count, frozen)


def _rows(fwd, k, start, which, row_of, count, frozen):
    """Propagate perturbed rows from layer ``k`` to the loss, in chunks; sum per perturbation.

    ``start(part, z, spare)`` writes the pre-activations ``z[k]`` of rows ``part`` into ``z`` (``spare``:
    a buffer of the same size it may use); row ``p`` belongs to
    perturbation ``which[p]`` and is row ``row_of[p]`` of the batch. Returns, per perturbation, the loss
    change, whether a mask changed, the first changed mask's ``(layer, row, unit)`` and the fraction of
    the step at which that kink lies.
    """
    d, n_layers = fwd.zs[k].shape[1], len(fwd.zs)
    per_chunk = max(1, _CHUNK_VALUES // d)
    size = min(per_chunk, len(which))
    # Buffers reused by every chunk: fresh large temporaries cost page faults (glibc returns freed
    # multi-MiB blocks to the OS), which took ~40% of the run time at d=64. (np.take into them uses
    # mode="clip", on valid indices: with the default mode NumPy buffers the output, ~10x slower.)
    work = np.empty((size, d)), np.empty((size, d)), np.empty((size, d), bool), np.empty((size, d), bool)
    squares = np.empty(len(which))
    layer, ratio, unit = np.full(len(which), n_layers), np.ones(len(which)), np.zeros(len(which), np.int64)
    for first in range(0, len(which), per_chunk):
        part = slice(first, first + per_chunk)
        rows = row_of[part]
        z = work[0][: len(rows)]
        start(part, z, work[1][: len(rows)])
        squares[part] = _propagate(fwd, k, z, rows, frozen, work, (layer[part], ratio[part], unit[part]))
    base = np.einsum("nd,nd->n", fwd.ys[-1], fwd.ys[-1])
    change = np.bincount(which, weights=squares - base[row_of], minlength=count)
    return (change, *_first_crossing(which, row_of, layer, ratio, unit, count, n_layers))


def _propagate(fwd, k, z, rows, frozen, work, crossing):
    """Finish perturbed forward passes of batch rows ``rows`` from their pre-activations ``z`` of layer
    ``k`` (a view of ``work[0]``; ``work`` holds two float and two bool buffers of at least its size).

    Fills ``crossing`` (views: per row, the first layer whose mask changed, the fraction of the step at
    which its nearest kink lies, and that kink's unit); returns each row's ``sum(y[L] ** 2)``.
    """
    count = len(z)
    spare, changed, base = work[1][:count], work[2][:count], work[3][:count]
    layer, ratio, unit = crossing
    n_layers = len(fwd.zs)
    for m in range(k, n_layers):
        if m > k:
            np.matmul(z, fwd.weights[m], out=spare)
            z, spare = spare, z
        np.take(fwd.masks[m], rows, axis=0, out=base, mode="clip")
        if frozen:
            z *= base
            continue
        np.greater(z, 0, out=changed)
        np.not_equal(changed, base, out=changed)
        any_changed = _rows_any(changed)
        new = np.flatnonzero(any_changed & (layer == n_layers)) if any_changed.any() else ()
        if len(new):
            # Up to the first layer that crossed, everything moved linearly with the step: the fraction
            # of the step at which each of its kinks lies is exact; the nearest is the one to report.
            z_base = fwd.zs[m][rows[new]]
            with np.errstate(divide="ignore", invalid="ignore"):
                fractions = np.where(changed[new], np.abs(z_base) / np.abs(z[new] - z_base), np.inf)
            nearest = fractions.argmin(axis=1)
            layer[new], ratio[new], unit[new] = m, fractions[np.arange(new.size), nearest], nearest
        np.maximum(z, 0.0, out=z)
    return np.einsum("pd,pd->p", z, z)


def _rows_any(flags: np.ndarray) -> np.ndarray:
    """``flags.any(axis=1)`` for a C-contiguous bool array, 8 flags at a time when rows allow it
    (a reduction over 64-bit words, several times faster than over bools)."""
    words = flags.view(np.uint64) if flags.shape[1] % 8 == 0 and flags.flags.c_contiguous else flags
    return np.asarray(words.any(axis=1))


def _first_crossing(which, row_of, layer, ratio, unit, count, n_layers):
    """Per perturbation, the earliest layer any of its rows crossed and, there, the nearest kink."""
    crossed = np.zeros(count, bool)
    where = np.full((count, 3), -1, np.int64)
    fraction = np.ones(count)
    hit = np.flatnonzero(layer < n_layers)
    if hit.size:
        order = hit[np.lexsort((ratio[hit], layer[hit], which[hit]))]
        first = order[np.r_[True, which[order][1:] != which[order][:-1]]]
        s = which[first]
        crossed[s], fraction[s] = True, ratio[first]
        where[s] = np.column_stack([layer[first], row_of[first], unit[first]])
    return crossed, where, fraction


def _finish(fwd, change, h, sigma, crossed, where):
    """Central differences from the loss changes at ``+h`` (first half) and ``-h`` (second half)."""
    s = len(h)
    value = (change[:s] - change[s:]) / (2 * h)
    u = _stack.UNIT_ROUNDOFF["float64"]
    n_terms = fwd.ys[-1].size
    # Each loss is off by at most 2 * sqrt(loss) * ||error of y[L]|| (Cauchy-Schwarz) plus its own sum
    # (worst case, (n - 1) * u * loss), bounds that hold for the changed rows' part as well as for a
    # full evaluation. The error of y[L] was modelled at the base point; it scales with the size of
    # y[L], which a large step changes: hence the factor sqrt(loss / base loss).
    base = fwd.loss
    losses = np.maximum(base + change, 0.0)
    grow = np.sqrt(np.maximum(losses / base, 1.0)) if base > 0 else 1.0
    loss_error = _stack.SAFETY * 2 * np.sqrt(losses) * sigma * grow + u * n_terms * (losses + base)
    error = (loss_error[:s] + loss_error[s:]) / (2 * h) + 4 * u * np.abs(value)
    kinked = crossed[:s] | crossed[s:]
    where_first = np.where(crossed[:s, None], where[:s], where[s:])
    return value, error, kinked, where_first
