"""Batched perturbed forward passes of the stack: the loss evaluations behind the oracle (``fd``).

Only the rows a perturbation changes are evaluated. The loss is a sum over the rows of the batch and
each row's forward pass is separate, so a row that a perturbation leaves unchanged contributes the
same to the losses at ``+h`` and ``-h`` and nothing to their difference. Perturbing ``W[k][i, j]``
moves ``z[k][n, j]`` by ``h * y[k][n, i]``: a row with ``y[k][n, i] == 0`` does not move, nor does a
row whose unit ``(k, n, j)`` is off and stays off (its ReLU output stays 0), so only about a quarter of
the rows of a ReLU layer are evaluated. The difference is computed from the changed rows' own terms
(``sum(y[L][n] ** 2)`` perturbed minus unperturbed), which is the same sum as a full evaluation's in
exact arithmetic and never less accurate. The changed rows are grouped by batch row, and the rows of
one batch row share a ``_Path``: its units reordered, those on at the base point first, and each later
layer's weights reduced to the rows of the units that are on (an off unit contributes an exact zero
while no mask changes, and a change of mask is caught before it matters), so each later layer is one
tall BLAS product of about half the size of a full one.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from crosscheck._compare import terms
from crosscheck._compare.constants import UNIT_ROUNDOFF
from crosscheck._workloads.stack import rounding
from crosscheck._workloads.stack.forward import Forward

#: Values of one propagated block (rows * d float64 values), sized to stay cache-friendly, and at most
#: ``_CHUNK_ROWS`` rows: measured at d = 64 (N = 8), blocks of 1024 rows took the oracle 105 ms and
#: blocks of 2048, 112 ms; at d = 128 and 256 the two sizes are the same.
_CHUNK_VALUES, _CHUNK_ROWS = 1 << 17, 1024


def block_rows(d: int) -> int:
    """How many perturbed rows of width ``d`` are propagated together (one BLAS product a layer)."""
    return max(1, min(_CHUNK_ROWS, _CHUNK_VALUES // d))


def output_sigmas(fwd: Forward) -> list[float]:
    """For each layer ``k``, the norm of the float64 rounding error of ``y[L]`` made by layers ``k``
    onwards: a variance bound, each layer's fresh rounding propagated through ``W**2`` (which can only
    overestimate it) and summed over ``y[L]``.

    The sum is linear in each layer's fresh variance ``f[m]``, so it is ``sum_{m >= k} <f[m], a[m]>``
    with ``a[L-1] = 1`` and ``a[m] = (a[m+1] * mask[m+1]) @ (W[m+1]**2).T``: one backward pass serves
    every ``k``, instead of propagating forward from each ``k``.
    """
    u = UNIT_ROUNDOFF["float64"]
    n_layers = len(fwd.zs)
    adjoint = np.ones_like(fwd.zs[-1])
    total, sums = 0.0, [0.0] * n_layers
    above: np.ndarray | None = None  # W[m + 1] ** 2, a layer at a time
    for m in reversed(range(n_layers)):
        if above is not None:
            adjoint = (adjoint * fwd.masks[m + 1]) @ above.T
        above = fwd.squared_weight(m)
        sigma = rounding.fresh_sigma(fwd.ys[m], fwd.weights[m], u, False, above)
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
    # Laid out (N, 2S), batch rows outermost: the reductions over the batch are elementwise.
    z_col = fwd.zs[k][:, cols]
    column = fwd.ys[k][:, rows]
    column *= steps
    column += z_col
    base = fwd.masks[k][:, cols]
    crossed = np.zeros(count, bool)
    where = np.full((count, 3), -1, np.int64)
    if frozen:
        new_column = column * base
    else:
        changed = (column > 0) != base
        crossed = changed.any(axis=0)
        hit = np.flatnonzero(crossed)
        if hit.size:
            with np.errstate(divide="ignore", invalid="ignore"):
                distance = np.abs(z_col[:, hit]) / np.abs(column[:, hit] - z_col[:, hit])
            nearest = np.where(changed[:, hit], distance, np.inf).argmin(axis=0)
            where[hit] = np.column_stack([np.full(hit.size, k), nearest, cols[hit]])
        new_column = np.maximum(column, 0.0, out=column)
    old_column = fwd.ys[k + 1][:, cols]
    if k + 1 == len(fwd.zs):
        change = np.einsum("ns,ns->s", new_column, new_column) - np.einsum("ns,ns->s", old_column, old_column)
        return change, crossed, where, np.ones(count)
    moved = new_column - old_column  # (N, 2S)
    # A perturbation that crossed a kink of layer k is retried whatever its later layers do: its rows
    # are not propagated. In every other moved row, unit j is on at the base point.
    moved[:, crossed] = 0.0
    row_of, which = np.nonzero(moved)  # grouped by batch row: each group shares one path

    def start(part: slice, z: np.ndarray, path: _Path) -> None:
        s = which[part]
        np.take(path.weights[k + 1], path.rank[k][cols[s]], axis=0, out=z, mode="clip")
        z *= moved[row_of[part.start], s][:, None]
        z += path.z[k + 1]

    change, more, at, later = _rows(fwd, k + 1, start, which, row_of, count, frozen)
    # A crossing in layer k is already known (the step is below the exact distance to it): shrink.
    fraction = np.where(crossed, 0.5, later)
    return change, crossed | more, np.where(crossed[:, None], where, at), fraction


def _direction_rows(fwd, k, moved, steps, frozen):
    """Loss changes along ``steps[s] * D[s % S]`` (layer ``k``, ``moved = y[k] @ D``), from the rows
    that move."""
    count, n_dirs = len(steps), len(moved)
    live = np.tile(np.any(moved != 0, axis=2), (2, 1))  # (2S, N)
    row_of, which = np.nonzero(live.T)  # grouped by batch row

    def start(part: slice, z: np.ndarray, path: _Path) -> None:
        s = which[part]
        along = np.take(moved[:, row_of[part.start]], path.order[k], axis=1)  # (S, d), in path order
        np.take(along, s % n_dirs, axis=0, out=z, mode="clip")
        z *= steps[s][:, None]
        z += path.z[k]

    return _rows(fwd, k, start, which, row_of, count, frozen)


@dataclasses.dataclass(frozen=True)
class _Path:
    """One batch row's forward pass, arranged for its perturbed rows' products.

    *Reduced* (the usual case): each layer's units reordered, those on at the base point first. A unit
    that is off contributes an exact zero to the next layer's products, so, while no mask changes, row
    n's next pre-activations are ``y[m][n, on] @ W[m][on, :]``: ``weights[m]`` holds
    ``W[m][order[m - 1][:on[m - 1]]][:, order[m]]``, about half of ``W[m]``, and each perturbed row
    costs about half the products of a full one (the same sums as a full evaluation's, less exact
    zeros). In the new order the mask check is "the first ``on[m]`` pre-activations positive, the
    others not": one comparison with a fixed pattern, ``pattern[m]``.

    *Plain* (a few rows at a large width, where making the reduced weights would cost more than it
    saves): the units in their own order, ``weights[m]`` is ``W[m]``, and the off units are zeroed
    (``keep[m]``) before each product.

    Attributes:
        order: per layer, row n's units, on first (a stable order); ``rank``: its inverse.
        on: per layer, how many leading units each product uses (``d`` for a plain path).
        z: per layer, ``z[m][n]`` in that order.
        flags: per layer, the base masks in that order; ``pattern``: the same as 64-bit words (as
            bools where ``d % 8``).
        weights: per layer, the (reduced, reordered) weights (None where not needed).
        keep: per layer, the base masks as floats to multiply by (a plain path), else None.
    """

    order: list[np.ndarray]
    rank: list[np.ndarray]
    on: list[int]
    z: list[np.ndarray]
    flags: list[np.ndarray]
    pattern: list[np.ndarray]
    weights: list[np.ndarray | None]
    keep: list[np.ndarray] | None = None


#: Bytes of reduced weights (``_Path.weights``) kept per forward pass, for every batch row; above it a
#: path is made per call (its cost shared by that call's rows).
_PATH_CACHE_BYTES = 64 * 2**20
#: Below this many rows of one batch row in a call, a path made for the call is plain: gathering the
#: reduced weights (about ``L d**2 / 2`` values) costs about as much as 50 rows' saved products.
_PATH_MIN_ROWS = 64


def _path(fwd: Forward, n: int, first: int, rows: int) -> _Path:
    """Row ``n``'s path for ``rows`` rows entering at layer ``first`` (weights from ``first`` on, orders
    from the layer before); kept with ``fwd`` for every layer when small enough."""
    layers, d = fwd.weights.shape[:2]
    cached = layers * len(fwd.zs[0]) * d * d * 4 <= _PATH_CACHE_BYTES  # about half of W per row
    if cached:
        paths = fwd.__dict__.setdefault("_paths", {})  # how a frozen dataclass keeps a cache
        path = paths.get(n)
        if path is not None:
            return path
        first = 0
    elif rows < _PATH_MIN_ROWS:
        masks = [mask[n] for mask in fwd.masks]
        identity = np.arange(d)
        return _Path(
            order=[identity] * layers,
            rank=[identity] * layers,
            on=[d] * layers,
            z=[z[n] for z in fwd.zs],
            flags=masks,
            pattern=[_words(mask) for mask in masks],
            weights=list(fwd.weights),
            keep=[mask.astype(float) for mask in masks],
        )
    order, rank = [np.empty(0, np.intp)] * layers, [np.empty(0, np.intp)] * layers
    on, z, flags = [0] * layers, [np.empty(0)] * layers, [np.empty(0, bool)] * layers
    weights: list[np.ndarray | None] = [None] * layers
    for m in range(max(first - 1, 0), layers):
        mask = fwd.masks[m][n]
        order[m] = np.argsort(~mask, kind="stable")
        rank[m] = np.argsort(order[m])
        on[m], z[m] = int(np.count_nonzero(mask)), fwd.zs[m][n, order[m]]
        flags[m] = np.arange(d) < on[m]
        if m >= max(first, 1):
            weights[m] = fwd.weights[m][np.ix_(order[m - 1][: on[m - 1]], order[m])]
    path = _Path(order, rank, on, z, flags, [_words(f) for f in flags], weights)
    if cached:
        paths[n] = path
    return path


def _words(flags: np.ndarray) -> np.ndarray:
    """Bool rows as 64-bit words where their length allows (8 flags a word-byte: several times faster
    to compare and reduce), else as they are."""
    if flags.shape[-1] % 8 == 0 and flags.flags.c_contiguous:
        return flags.view(np.uint64)
    return flags


def _rows(fwd, k, start, which, row_of, count, frozen):
    """Propagate perturbed rows from layer ``k`` to the loss, in chunks; sum per perturbation.

    Row ``p`` belongs to perturbation ``which[p]`` and is row ``row_of[p]`` of the batch (``row_of``
    sorted: the rows of one batch row share a ``_Path``). ``start(part, z, path)`` writes the
    pre-activations ``z[k]`` of rows ``part`` (all of one batch row) into ``z``, in the path's order.
    Returns, per perturbation, the loss change, whether a mask changed, the first changed mask's
    ``(layer, row, unit)`` and the fraction of the step at which that kink lies.
    """
    d, n_layers = fwd.zs[k].shape[1], len(fwd.zs)
    per_chunk = block_rows(d)
    size = min(per_chunk, max(len(which), 1))
    # Buffers reused by every chunk: fresh large temporaries cost page faults (glibc returns freed
    # multi-MiB blocks to the OS), which took ~40% of the run time at d=64. (np.take into them uses
    # mode="clip", on valid indices: with the default mode NumPy buffers the output, ~10x slower.)
    words = d // 8 if d % 8 == 0 else d  # per row: the words (or flags) compared with the pattern
    differ = np.zeros((size, -(-words // 8) * 8), bool)  # padded to whole 64-bit lanes (kept False)
    work = np.empty((size, d)), np.empty((size, d)), np.empty((size, d), bool), differ
    squares = np.empty(len(which))
    layer, ratio, unit = np.full(len(which), n_layers), np.ones(len(which)), np.zeros(len(which), np.int64)
    bounds = np.searchsorted(row_of, np.arange(len(fwd.zs[0]) + 1))
    for n in np.flatnonzero(np.diff(bounds)):
        path = _path(fwd, int(n), k, int(bounds[n + 1] - bounds[n]))
        # Blocks of equal size, none above per_chunk (no small remainder: each costs a call a layer).
        first, total = int(bounds[n]), int(bounds[n + 1] - bounds[n])
        pieces = -(-total // per_chunk)
        for piece in range(pieces):
            part = slice(first + piece * total // pieces, first + (piece + 1) * total // pieces)
            rows = part.stop - part.start
            start(part, work[0][:rows], path)
            crossing = (layer[part], ratio[part], unit[part])
            buffers = tuple(buffer[:rows] for buffer in work)
            squares[part] = _propagate(k, buffers, path, frozen, crossing, n_layers)
    base = np.einsum("nd,nd->n", fwd.ys[-1], fwd.ys[-1])
    change = np.bincount(which, weights=squares - base[row_of], minlength=count)
    return (change, *_first_crossing(which, row_of, layer, ratio, unit, count, n_layers))


def _propagate(k, buffers, path, frozen, crossing, n_layers):
    """Finish perturbed forward passes of rows of one batch row from their pre-activations of layer
    ``k`` (in ``buffers[0]``, in ``path``'s order; ``buffers``: two float buffers, a bool one of the
    rows' signs and a bool one of their comparisons, padded to whole 64-bit lanes).

    Fills ``crossing`` (views: per row, the first layer whose mask changed, the fraction of the step at
    which its nearest kink lies, and that kink's unit); returns each row's ``sum(y[L] ** 2)``. After a
    row's first change of mask its masks are held: its later values are not used (the step is retried).
    """
    z, spare, flags, differ = buffers
    layer, ratio, unit = crossing
    words = path.pattern[k].shape[0]
    # Per row, whether its mask differs from the base pattern: compared 8 units at a time (words), the
    # comparisons' flags read as 64-bit lanes; one lane a row is the answer, more are counted by a
    # product (numpy's row-wise reductions pay a fixed cost per row). A row counts while ``alive``: no
    # change of mask yet.
    lanes = differ.view(np.uint64)
    if lanes.shape[1] == 1:
        alive = np.where(layer == n_layers, ~np.uint64(0), np.uint64(0))
        lane_flags, ones = None, None
    else:
        alive = (layer == n_layers).astype(float)
        lane_flags, ones = np.empty(lanes.shape), np.ones(lanes.shape[1])
    hits = np.empty_like(alive)
    for m in range(k, n_layers):
        if m > k:
            if path.keep is not None:
                z *= path.keep[m - 1]  # ReLU with the masks held (a plain path)
            np.matmul(z[:, : path.on[m - 1]], path.weights[m], out=spare)
            z, spare = spare, z
        if frozen:
            continue
        np.greater(z, 0, out=flags)
        np.not_equal(_words(flags), path.pattern[m], out=differ[:, :words])
        if lane_flags is None:
            np.bitwise_and(lanes[:, 0], alive, out=hits)
        else:
            np.not_equal(lanes, 0, out=lane_flags)
            np.multiply(lane_flags @ ones, alive, out=hits)
        if np.count_nonzero(hits):
            new = np.flatnonzero(hits)
            alive[new] = 0
            # Up to the first layer that crossed, everything moved linearly with the step: the fraction
            # of the step at which each of its kinks lies is exact; the nearest is the one to report.
            # (Where a mask changed, the pre-activation moved: no division by zero.)
            z_base, z_new = path.z[m], z[new]
            changed = (z_new > 0) != path.flags[m]
            moved = np.abs(np.subtract(z_new, z_base, out=z_new), out=z_new)
            fractions = np.divide(np.abs(z_base), moved, out=np.full(moved.shape, np.inf), where=changed)
            nearest = fractions.argmin(axis=1)
            layer[new], ratio[new] = m, fractions[np.arange(new.size), nearest]
            unit[new] = path.order[m][nearest]
    if path.keep is not None:
        z *= path.keep[n_layers - 1]
    y = z[:, : path.on[n_layers - 1]]
    return np.einsum("pd,pd->p", y, y)


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
    u = UNIT_ROUNDOFF["float64"]
    n_terms = fwd.ys[-1].size
    # Each loss is off by at most 2 * sqrt(loss) * ||error of y[L]|| (Cauchy-Schwarz) plus its own sum
    # (worst case, (n - 1) * u * loss), bounds that hold for the changed rows' part as well as for a
    # full evaluation. The error of y[L] was modelled at the base point; it scales with the size of
    # y[L], which a large step changes: hence the factor sqrt(loss / base loss).
    base = fwd.loss
    losses = np.maximum(base + change, 0.0)
    grow = np.sqrt(np.maximum(losses / base, 1.0)) if base > 0 else 1.0
    # SAFETY sigmas of 2 sqrt(loss) ||error||, multiplied in the order it always was (bit for bit).
    loss_error = terms.modelled(2 * np.sqrt(losses)) * sigma * grow + u * n_terms * (losses + base)
    error = (loss_error[:s] + loss_error[s:]) / (2 * h) + 4 * u * np.abs(value)
    kinked = crossed[:s] | crossed[s:]
    where_first = np.where(crossed[:s, None], where[:s], where[s:])
    return value, error, kinked, where_first
