"""The running statistics of a port whose mapping is its own conversion (``Port(convert=fn)``), paired
through the conversion's leaves.

``fn``, traced tensor by tensor when the port is prepared (``declare.convert``), says which JAX leaves
each PyTorch tensor reaches: ``bn.running_mean`` reaches ``batch_stats/bn/mean``. A running statistic
whose leaves are made of it alone is paired with them: PyTorch's updated buffers, put through ``fn``
with the rest of its tensors as they were, give the leaves the JAX side's training-mode call must
update them to, compared leaf by leaf and named by the PyTorch statistic (so by its module). Nothing
is read back through ``fn``'s transpose: a conversion need not be a selection for this.

A statistic that shares a leaf with another tensor (a conversion that stacks the mean and the variance
into one leaf) cannot be told apart from it there: it is not paired, and the check says it was not
compared (a failing row, never a silent pass).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from crosscheck._workloads.port.declare.build import Prepared


def positions(prepared: Prepared, names: Sequence[str]) -> tuple[dict[str, list[int]], str]:
    """Each running statistic of ``names`` -> the positions (in the JAX side's leaves) of the leaves
    it alone makes, and why one cannot be paired ("" when every one is)."""
    order = {leaf.path: i for i, leaf in enumerate(prepared.jax_side.leaves)}
    makers: dict[tuple[str, ...], set[str]] = {}
    for e in prepared.table.mapped():
        if e.torch is not None and e.jax is not None:
            makers.setdefault(e.jax.path, set()).add(e.torch.name)
    out: dict[str, list[int]] = {}
    for k in names:
        paths = [p for p, made in makers.items() if k in made]
        shared = next(((p, made - {k}) for p, made in makers.items() if k in made and made != {k}), None)
        if shared is not None:
            path, others = shared
            return out, (
                f"`{k}` makes the JAX leaf `{'/'.join(path)}` together with `{sorted(others)[0]}` "
                "(`convert=`), so its update cannot be told apart there; a conversion that gives each "
                "running statistic leaves of its own has them compared"
            )
        if not paths:
            return out, f"`{k}` reaches no JAX leaf through `convert=`"
        out[k] = sorted(order[p] for p in paths)
    return out, ""


def gathered(leaves: Sequence[Any], paired: Mapping[str, list[int]]) -> dict[str, np.ndarray]:
    """Each statistic's leaves, flattened end to end in float64 (``positions``)."""
    return {
        k: np.concatenate([np.asarray(leaves[i], np.float64).ravel() for i in at]) for k, at in paired.items()
    }


def converted(
    prepared: Prepared, state: Mapping[str, Any], updated: Mapping[str, np.ndarray], wide: bool
) -> list[Any]:
    """The JAX leaves ``fn`` makes of PyTorch's tensors ``state`` with its updated running statistics
    ``updated`` in their place (``wide``: in float64), the leaves the JAX side's call must update to."""
    import jax

    from crosscheck._workloads.port.sides.jax_side import to_jax

    assert prepared.conversion is not None
    arrays = {k: np.asarray(v) for k, v in state.items()}
    dtypes = {k: v.dtype for k, v in arrays.items()}
    arrays.update({k: np.asarray(v).astype(dtypes[k]) for k, v in updated.items()})
    with jax.enable_x64(wide):
        return [np.asarray(v) for v in prepared.conversion.leaves(to_jax(arrays))]
