"""The JAX side of a train: ``steps`` optax steps on the port's own parameter tree (imported only when
used).

The tree is the JAX model's, made from the case's PyTorch arrays through the port's mapping (transposes
applied); the optax transformation updates the trained part of it (a linen module's ``params``
collection, else the whole tree) as a JAX training loop would. After each step every leaf is mapped
back to its PyTorch name, its transform undone, for the comparison.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import jax
import numpy as np

from crosscheck._workloads.port.build import Prepared, _jax_inputs, _loss, jax_leaves
from crosscheck._workloads.port.jax_side import to_jax

#: Up to this many steps run eagerly: compiling the step costs more than it saves (the classification's
#: short re-runs); longer runs are compiled.
EAGER_STEPS = 3


def trajectory(
    prepared: Prepared,
    factory: Callable[..., Any],
    hyper: Mapping[str, Any],
    params: dict[str, np.ndarray],
    inputs: dict[str, np.ndarray],
    steps: int,
) -> dict[str, np.ndarray]:
    """Every parameter after each step in PyTorch's names and layouts, stacked: ``name -> (steps + 1,
    *shape)`` (row 0: the start)."""
    import optax

    side, loss = prepared.jax_side, _loss(prepared.port)
    with jax.enable_x64(any(v.dtype == np.float64 for v in params.values())):
        arrays = to_jax(inputs)
        tree = jax.tree_util.tree_unflatten(side.treedef, jax_leaves(prepared, to_jax(params), arrays))
        given = _jax_inputs(prepared.port, prepared.user_inputs(arrays))
        dtype = next(iter(jax.tree_util.tree_leaves(tree))).dtype
        linen = side.kind == "linen"
        trained = tree["params"] if linen else tree

        def objective(part: Any) -> Any:
            whole = {**tree, "params": part} if linen else part
            return loss(side.forward(jax.tree_util.tree_leaves(whole), given, dtype))

        transformation = factory(**hyper)
        state = transformation.init(trained)

        def step(part: Any, state: Any) -> tuple[Any, Any]:
            updates, state = transformation.update(jax.grad(objective)(part), state, part)
            return optax.apply_updates(part, updates), state

        if steps > EAGER_STEPS:  # compiled once, when the steps repay it
            step = jax.jit(step)

        rows = [_named(prepared, tree)]
        for _ in range(steps):
            trained, state = step(trained, state)
            rows.append(_named(prepared, {**tree, "params": trained} if linen else trained))
    return {k: np.stack([row[k] for row in rows]) for k in rows[0]}


def _named(prepared: Prepared, tree: Any) -> dict[str, np.ndarray]:
    """The tree's leaves by PyTorch parameter name, in PyTorch's layout."""
    out = {}
    for (name, perm), leaf in zip(prepared.sources(), jax.tree_util.tree_leaves(tree), strict=True):
        if name in prepared.parameters and name not in out:
            value = np.asarray(leaf)
            out[name] = value if perm is None else np.transpose(value, np.argsort(perm))
    return out
