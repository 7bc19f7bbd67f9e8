"""Which order a port's head axes are read in, proven by the values.

Where a PyTorch projection's flat axis splits into two head axes of a JAX leaf (``(E, E)`` onto a Flax
``DenseGeneral`` kernel ``(E, 8, 4)``), PyTorch's index ``h * D + d`` fits the shapes read either way:
heads first (``(E, H, D)``, H = 8) or heads last (``(E, D, H)``, ``features=(D, H)``, H = 4). The
shapes cannot tell which; the values can. The mapping reads them first (``assemble``); where the port's
output then differs from PyTorch's on the example inputs, the rows are read in groups, and every
reading of the groups is tried: a group is the rows whose head axes have the same sizes and split the
same axis of their PyTorch tensors (a projection's output features, as ``q_proj``'s kernel and bias
do, or its input features, as ``o_proj``'s kernel does), so that a port whose query kernels are
``(E, D, H)`` and whose output kernel is ``(H, D, E)`` is read so even where ``H == D`` and the sizes
alone would tie the two. The one reading whose output agrees is kept, said in its rows (``heads last,
proven by the values``). Where none agrees, the rows keep heads first and say that the order was not
proven, with the override that reads the heads last (``overrides``); the check then fails on the
port's own difference, never on the order. Where several agree (inputs that cannot tell the readings
apart, a sequence of one token say), nothing is guessed: the rows whose order differs between them are
ambiguous, and the port is refused with the override that decides each (``, heads first`` or ``,
heads last``).

A reading "agrees" when the two outputs differ by less than ``AGREE`` of the largest output magnitude
in float32: a healthy port's float32 rounding is far smaller, a wrong order's difference is of the
output's own size. The threshold chooses among readings only; every reading is then checked by the
ordinary judges, with their own tolerances.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from crosscheck._errors import reraise_user_interrupt
from crosscheck._workloads.losses import floating_outputs
from crosscheck._workloads.port.mapping import assemble
from crosscheck._workloads.port.mapping.matching import (
    HEADS_FIRST,
    HEADS_LAST,
    Entry,
    permutation,
    said_order,
)
from crosscheck._workloads.port.mapping.table import Table

#: Readings agree below this fraction of the output's largest magnitude (float32): see the docstring.
AGREE = 1e-3
#: At most this many groups of head rows are read both ways (2 ** GROUPS forward passes).
GROUPS = 4
PROVEN = f"{HEADS_LAST}, proven by the values (heads first, the port's output differs)"
UNPROVEN = "the head order is not proven by the values (no order made the outputs agree): heads first"
UNDECIDED = (
    "the head order is not decided by the values: {n} readings of the head axes made the outputs agree, "
    "this row's heads first in one and last in another (inputs that cannot tell them apart?)"
)
#: A group of head rows: their head axes' sizes and the axis of their PyTorch tensors that splits.
Key = tuple[tuple[int, ...], int]


def head_split(entry: Entry) -> Key | None:
    """The head axes ``entry``'s piece splits into (two or more of length > 1) and the axis of its
    PyTorch tensor that splits, or None: none. A row whose transform says its head order (``, heads
    last``, ``, heads first``) is not read again; an override that says only ``transpose`` (an einsum's
    kernel, whose layout no module tells) settles the transpose, and its head order is read as any
    other row's."""
    if entry.status != "mapped" or entry.torch is None:
        return None
    assert entry.jax is not None and entry.transform is not None
    if said_order(entry.transform):
        return None
    shape = entry.torch.shape
    if entry.take is not None:
        axis, start, stop = entry.take
        shape = tuple(stop - start if a == axis else n for a, n in enumerate(shape))
    perm = permutation(entry.transform)
    moved = shape if perm is None else tuple(shape[i] for i in perm)
    if len(perm or moved) != len(shape):
        return None
    target = assemble.box_shape(entry.jax.shape, entry.box)
    for axis, group in enumerate(assemble.head_groups(moved, target) or []):
        sizes = tuple(target[a] for a in group if target[a] > 1)
        if len(sizes) > 1:
            return sizes, axis if perm is None else perm[axis]
    return None


def groups(table: Table) -> dict[Key, list[int]]:
    """Each group of head rows (``head_split``) -> its rows (positions in ``table.entries``)."""
    out: dict[Key, list[int]] = {}
    for i, e in enumerate(table.entries):
        key = head_split(e)
        if key is not None:
            out.setdefault(key, []).append(i)
    return out


def read_last(table: Table, rows: set[int], how: str) -> Table:
    """``table`` with ``rows`` reading their heads last, ``how`` said in them."""
    entries = list(table.entries)
    for i in rows:
        e = entries[i]
        assert e.transform is not None
        entries[i] = dataclasses.replace(e, transform=f"{e.transform}, {HEADS_LAST}", how=f"{e.how}; {how}")
    return Table(tuple(entries))


def unproven(table: Table, rows: set[int]) -> Table:
    """``table`` with ``rows`` saying that their order is not proven, and (a whole leaf's) the override
    that reads them the other way."""
    entries = list(table.entries)
    for i in rows:
        e = entries[i]
        assert e.torch is not None and e.jax is not None
        how = f"{e.how}; {UNPROVEN}"
        if not e.take and not e.box:
            how += (
                f"; if the heads are last: overrides={{'{e.torch.name}': ('{'/'.join(e.jax.path)}', "
                f"'{e.transform}, {HEADS_LAST}')}}"
            )
        entries[i] = dataclasses.replace(e, how=how)
    return Table(tuple(entries))


def prove(table: Table, differs: Callable[[Table], float | None]) -> Table:
    """``table`` with each group of head rows read in the order the values prove (see the module
    docstring); ``differs(table)``: how far the port's output is from PyTorch's with that table, as a
    fraction of the output's largest magnitude (None: it could not be computed)."""
    found = groups(table)
    if not found:
        return table
    first = differs(table)
    if first is not None and first < AGREE:
        return table
    keys = list(found)[:GROUPS]
    agreeing = []
    for lasts in itertools.product((False, True), repeat=len(keys)):
        if any(lasts):
            score = differs(read_last(table, _rows(found, keys, lasts), PROVEN))
            if score is not None and score < AGREE:
                agreeing.append(lasts)
    if not agreeing:
        return unproven(table, {i for rows in found.values() for i in rows})
    if len(agreeing) == 1:
        return read_last(table, _rows(found, keys, agreeing[0]), PROVEN)
    # Each group read the same way by every agreeing reading is proven so; the others are not decided.
    settled = tuple(all(r[k] for r in agreeing) for k in range(len(keys)))
    open_ = [key for k, key in enumerate(keys) if len({r[k] for r in agreeing}) > 1]
    proven = read_last(table, _rows(found, keys, settled), PROVEN)
    return undecided(proven, {i for key in open_ for i in found[key]}, len(agreeing))


def _rows(found: dict[Key, list[int]], keys: list[Key], lasts: tuple[bool, ...]) -> set[int]:
    """The rows of the groups ``keys`` that ``lasts`` reads heads last."""
    return {i for key, last in zip(keys, lasts, strict=True) if last for i in found[key]}


def undecided(table: Table, rows: set[int], readings: int) -> Table:
    """``table`` with ``rows`` ambiguous: ``readings`` readings made the outputs agree and read them
    differently, so their order is the user's to say (``, heads first`` or ``, heads last``)."""
    entries = list(table.entries)
    for i in rows:
        e = entries[i]
        assert e.transform is not None
        assert e.torch is not None and e.jax is not None
        choices = (f"{e.transform}, {HEADS_FIRST}", f"{e.transform}, {HEADS_LAST}")
        how = f"{e.how}; {UNDECIDED.format(n=readings)}"
        if not e.take and not e.box:  # the JAX path too: a head order is found by the shapes of a leaf
            how += f"; decide with overrides={{'{e.torch.name}': ('{'/'.join(e.jax.path)}', TRANSFORM)}}"
        entries[i] = dataclasses.replace(e, transform=None, how=how, choices=choices)
    return Table(tuple(entries))


def differs(
    port: Any, wrapped: Any, side: Any, values: Mapping[str, np.ndarray], example: dict, jax_in: dict
) -> Callable[[Table], float | None]:
    """``prove``'s measure for a port: its float32 output on the example inputs against PyTorch's, the
    JAX leaves built by a table. PyTorch's output is computed once, when first measured: a table with
    no head rows to prove (``prove`` returns it as it is) costs no forward pass; a pass that fails is
    None."""
    import jax.numpy as jnp

    from crosscheck._workloads.port.sides import torch_side

    floats = {
        k: v.astype(np.float32) if np.issubdtype(v.dtype, np.floating) else v for k, v in values.items()
    }
    pick = port.output or (lambda out: out)
    computed: list[list[np.ndarray] | None] = []  # PyTorch's output, once measured

    def measure(table: Table) -> float | None:
        if not computed:
            computed.append(
                _outputs(
                    lambda: pick(
                        torch_side.call(wrapped, torch_side.to_torch(floats), torch_side.to_torch(example))
                    )
                )
            )
        reference = computed[0]
        if reference is None:
            return None
        pieces: dict[tuple[str, ...], list[assemble.Piece]] = {}
        for e in table.mapped():
            assert e.jax is not None
            pieces.setdefault(e.jax.path, []).append(assemble.Piece.of(e))
        if any(leaf.path not in pieces for leaf in side.leaves):
            return None
        leaves = [jnp.asarray(assemble.leaf(np, pieces[j.path], j.shape, floats)) for j in side.leaves]
        got = _outputs(lambda: pick(side.forward(leaves, jax_in, jnp.float32)))
        if got is None or [a.shape for a in got] != [a.shape for a in reference] or not reference:
            return None
        scale = max(float(np.max(np.abs(a), initial=0.0)) for a in reference) or 1.0
        return (
            max(float(np.max(np.abs(a - b), initial=0.0)) for a, b in zip(got, reference, strict=True))
            / scale
        )

    return measure


def _outputs(run: Callable[[], Any]) -> list[np.ndarray] | None:
    """The floating-point arrays of what ``run`` returns, as float64 NumPy arrays; None where it fails
    (the check runs it again and says why)."""
    try:
        out = run()
    except BaseException as exc:  # the user's code: its failure is the check's to report
        reraise_user_interrupt(exc)
        return None
    arrays = []
    for a in floating_outputs(out):
        a = a.detach().cpu().numpy() if hasattr(a, "detach") else a
        arrays.append(np.asarray(a, dtype=np.float64))
    return arrays
