"""Which order a port's head axes are read in, proven by the values.

Where a PyTorch projection's flat axis splits into two head axes of a JAX leaf (``(E, E)`` onto a Flax
``DenseGeneral`` kernel ``(E, 8, 4)``), PyTorch's index ``h * D + d`` fits the shapes read either way:
heads first (``(E, H, D)``, H = 8) or heads last (``(E, D, H)``, ``features=(D, H)``, H = 4). The
shapes cannot tell which; the values can. The mapping reads them first (``assemble``); where the port's
output then differs from PyTorch's on the example inputs, each group of rows whose head axes have the
same sizes is read the other way too, and the reading whose output agrees is kept, said in its rows
(``heads last, proven by the values``). Where none agrees, the rows keep heads first and say that the
order was not proven, with the override that reads the heads last (``overrides``); the check then
fails on the port's own difference, never on the order.

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
from crosscheck._workloads.port.mapping.matching import HEADS_LAST, Entry, heads_order, permutation
from crosscheck._workloads.port.mapping.table import Table

#: Readings agree below this fraction of the output's largest magnitude (float32): see the docstring.
AGREE = 1e-3
#: At most this many groups of head sizes are read both ways (2 ** GROUPS forward passes).
GROUPS = 4
PROVEN = f"{HEADS_LAST}, proven by the values (heads first, the port's output differs)"
UNPROVEN = "the head order is not proven by the values (no order made the outputs agree): heads first"


def head_sizes(entry: Entry) -> tuple[int, ...]:
    """The head axes ``entry``'s piece splits into (two or more of length > 1), or ``()``: none. A row
    whose transform says its head order (``, heads last``) is not read again; an override that says
    only ``transpose`` (an einsum's kernel, whose layout no module tells) settles the transpose, and
    its head order is read as any other row's."""
    if entry.status != "mapped" or entry.torch is None:
        return ()
    assert entry.jax is not None and entry.transform is not None
    if heads_order(entry.transform)[1]:
        return ()
    shape = entry.torch.shape
    if entry.take is not None:
        axis, start, stop = entry.take
        shape = tuple(stop - start if a == axis else n for a, n in enumerate(shape))
    perm = permutation(entry.transform)
    moved = shape if perm is None else tuple(shape[i] for i in perm)
    if len(perm or moved) != len(shape):
        return ()
    return assemble.splits_heads(moved, assemble.box_shape(entry.jax.shape, entry.box))


def groups(table: Table) -> dict[tuple[int, ...], list[int]]:
    """Head sizes -> the rows (positions in ``table.entries``) whose pieces split into them."""
    out: dict[tuple[int, ...], list[int]] = {}
    for i, e in enumerate(table.entries):
        sizes = head_sizes(e)
        if sizes:
            out.setdefault(sizes, []).append(i)
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
    for lasts in itertools.product((False, True), repeat=len(keys)):
        if not any(lasts):
            continue
        rows = {i for key, last in zip(keys, lasts, strict=True) if last for i in found[key]}
        trial = read_last(table, rows, PROVEN)
        score = differs(trial)
        if score is not None and score < AGREE:
            return trial
    return unproven(table, {i for rows in found.values() for i in rows})


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
