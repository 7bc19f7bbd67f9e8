"""The JAX side of a train: ``steps`` optax steps on the port's own parameter tree (imported only when
used).

The tree is the JAX model's, made from the case's PyTorch arrays through the port's mapping (transposes
applied); the optax transformation updates the trained part of it (a linen module's ``params``
collection, else the whole tree) as a JAX training loop would. After each step every leaf is mapped
back to its PyTorch name, its transform undone, for the comparison.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import numpy as np

from crosscheck._errors import user_call
from crosscheck._types import FrameworkArray, PyTree
from crosscheck._workloads.port.declare.build import Prepared, jax_leaves, jax_side_inputs, port_loss
from crosscheck._workloads.port.judge.running import statistics
from crosscheck._workloads.port.mapping import assemble
from crosscheck._workloads.port.sides.jax_side import key_name, to_jax
from crosscheck._workloads.train import running
from crosscheck._workloads.train.runs import EAGER_STEPS


def trajectory(
    prepared: Prepared,
    factory: Callable[..., Any],
    hyper: Mapping[str, Any],
    params: dict[str, np.ndarray],
    inputs: dict[str, np.ndarray],
    steps: int,
    *,
    zero: tuple[str, ...] = (),
) -> dict[str, np.ndarray]:
    """Every parameter after each step in PyTorch's names and layouts, stacked: ``name -> (steps + 1,
    *shape)`` (row 0: the start); the gradient entries made of ``zero``'s set to exact zeros before
    each step (``_zeroed``)."""
    import optax

    side, loss = prepared.jax_side, port_loss(prepared.port)
    with jax.enable_x64(any(v.dtype == np.float64 for v in params.values())):
        arrays = to_jax(inputs)
        tree = jax.tree_util.tree_unflatten(side.treedef, jax_leaves(prepared, to_jax(params), arrays))
        given = jax_side_inputs(prepared.port, prepared.user_inputs(arrays))
        dtype = next(iter(jax.tree_util.tree_leaves(tree))).dtype
        linen = side.kind == "linen"
        trained = tree["params"] if linen else tree
        names = statistics(prepared)  # `batch_stats`, nnx's `BatchStat`s: carried from step to step

        def objective(part: PyTree, whole: PyTree) -> FrameworkArray:
            whole = {**whole, "params": part} if linen else part
            return loss(side.forward(jax.tree_util.tree_leaves(whole), given, dtype))

        transformation = factory(**hyper)
        state = transformation.init(trained)
        start = _state(prepared, state, trained, (lambda part: {**tree, "params": part}) if linen else None)

        compiled = jax.grad(objective)
        if steps > EAGER_STEPS:  # the model's gradient compiled once, when the steps repay it
            compiled = jax.jit(compiled)

        def carried(part: PyTree) -> PyTree:  # at the collections carried so far (`tree`)
            return compiled(part, tree)

        gradient: Callable[[Any], Any] = carried
        if zero:
            gradient = _zeroed(carried, prepared, params, arrays, zero, linen)

        def step(part: Any, state: Any) -> tuple[Any, Any]:  # eager: the user's Python runs every step
            if isinstance(transformation, Stepper):
                return transformation.step(part, gradient(part), state)
            updates, state = transformation.update(gradient(part), state, part)
            return optax.apply_updates(part, updates), state

        rows = [_named(prepared, tree, names)]
        for _ in range(steps):
            if names:  # the step's forward updates them, from the parameters before the step
                tree, trained = _carried(side, tree, trained, given, dtype)
            trained, state = step(trained, state)
            rows.append(_named(prepared, {**tree, "params": trained} if linen else trained, names))
    return {**{k: np.stack([row[k] for row in rows]) for k in rows[0]}, **start}


def _carried(side: Any, tree: PyTree, trained: PyTree, given: dict, dtype: Any) -> tuple[PyTree, PyTree]:
    """The model's tree and its trained part after one training-mode forward (``JaxSide.updated``): a
    linen module's ``batch_stats`` in the tree, an nnx module's ``BatchStat`` variables in the trained
    part (its whole state), each updated, the parameters as they were."""
    linen = side.kind == "linen"
    after = side.updated(
        jax.tree_util.tree_leaves({**tree, "params": trained} if linen else trained), given, dtype
    )
    new = jax.tree_util.tree_unflatten(side.treedef, after)
    return ({**new, "params": trained}, trained) if linen else (tree, new)


def _zeroed(
    gradient: Callable[[Any], Any], prepared: Prepared, params: dict, arrays: dict, zero: tuple, linen: bool
) -> Callable[[Any], Any]:
    """``gradient`` with the entries made of the ``zero`` parameters set to exact zeros. Which entries
    those are is found by mapping the parameters with ``zero``'s set to NaN through the port's mapping
    (or ``convert=``): NaN follows every transpose, split and concatenation to the entries it makes."""
    import jax.numpy as jnp

    marked = {k: np.full_like(v, np.nan) if k in zero else v for k, v in params.items()}
    side = prepared.jax_side
    tree = jax.tree_util.tree_unflatten(side.treedef, jax_leaves(prepared, to_jax(marked), arrays))
    mask = jax.tree_util.tree_map(jnp.isnan, tree["params"] if linen else tree)

    def zeroed(part: PyTree) -> PyTree:
        return jax.tree_util.tree_map(lambda g, m: jnp.where(m, jnp.zeros_like(g), g), gradient(part), mask)

    return zeroed


class Stepper:
    """A user's step function as the JAX side's optimizer: ``fn(params, grads, state, **hyper) ->
    (params, state)``, ``state`` None at the first step."""

    def __init__(self, fn: Callable[..., Any], hyper: Mapping[str, Any]) -> None:
        self.fn, self.hyper = fn, dict(hyper)

    def init(self, params: Any) -> None:
        return None

    def step(self, params: Any, grads: Any, state: Any) -> tuple[Any, Any]:
        out = self.fn(params, grads, state, **self.hyper)
        if not (isinstance(out, tuple) and len(out) == 2):
            raise TypeError(f"`jax_step` returned {type(out).__name__}; expected a pair (params, state)")
        return out


def check_step(prepared: Prepared, fn: Callable[..., Any], hyper: Mapping[str, Any], where: str) -> None:
    """Raise one line where ``jax_step``, traced once on the trained tree's shapes (zero gradients, no
    state: ``jax.eval_shape``, no arithmetic), does not return ``(params, state)`` with ``params`` the
    tree it was given: a leaf dropped, added or of another shape. Its trajectory would otherwise fail
    deep in JAX ("cotangent tree does not match") or in reading the leaves back."""
    side = prepared.jax_side
    shapes = [jax.ShapeDtypeStruct(tuple(leaf.shape), np.float32) for leaf in side.leaves]
    tree = jax.tree_util.tree_unflatten(side.treedef, shapes)
    trained = tree["params"] if side.kind == "linen" else tree
    what = "`jax_step(params, grads, state)`"
    out = user_call(where, what, jax.eval_shape, lambda p, g: fn(p, g, None, **hyper), trained, trained)
    if not (isinstance(out, tuple) and len(out) == 2):
        raise ValueError(f"{where}: {what} returned {type(out).__name__}; expected a pair (params, state).")
    given, found = _shaped(trained), _shaped(out[0])
    missing = [p for p in given if p not in found]
    problems = [f"no leaf `{p}` {given[p]}" for p in missing[:1]]
    problems += [
        f"the leaf `{p}` of shape {found[p]}, not {given[p]}"
        for p in given
        if found.get(p, given[p]) != given[p]
    ]
    problems += [f"an extra leaf `{p}` {found[p]}" for p in found if p not in given]
    if problems:
        raise ValueError(
            f"{where}: {what} returned params with {problems[0]}; expected the tree it was given, every "
            f"leaf of its shape ({len(given)} leaves, found {len(found)})."
        )


def _shaped(tree: Any) -> dict[str, tuple[int, ...]]:
    """Each leaf's shape by its path (``fc1/kernel``)."""
    return {
        "/".join(key_name(k) for k in path): tuple(np.shape(leaf))
        for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]
    }


def stepper(fn: Callable[..., Any], **hyper: Any) -> Stepper:
    """The optimizer of a ``jax_step`` (``Train(jax_step=...)``)."""
    return Stepper(fn, hyper)


def _named(prepared: Prepared, tree: Any, statistics: Sequence[str] = ()) -> dict[str, np.ndarray]:
    """The tree's leaves by PyTorch parameter name, in PyTorch's layout (``assemble.back``; through a
    ``convert=``'s transpose, ``convert.Conversion.back``), then the running ``statistics``' (keyed
    ``running.key``)."""
    leaves = jax.tree_util.tree_leaves(tree)
    shapes = {**prepared.parameters, **{k: prepared.values[k].shape for k in statistics}}
    if prepared.conversion is not None:
        others = {k: v for k, v in prepared.values.items() if k not in shapes}
        named = prepared.conversion.back(leaves, shapes, to_jax(others))
    else:
        named = assemble.back(prepared.pieces(), leaves, shapes)
    return {running.key(k) if k in statistics else k: v for k, v in named.items()}


def _state(prepared: Prepared, state: Any, trained: Any, whole: Callable[[Any], Any] | None) -> dict:
    """The optax state's parts shaped like the trained tree (``mu``) or scalar (``count``), by
    ``"name (kind)"`` in PyTorch's names and layouts, as one-row trajectories (a scalar repeated for
    every parameter); ``whole`` makes the model's tree of a trained part (a linen module's)."""
    from crosscheck._workloads.train.state import key

    dtype = next(iter(jax.tree_util.tree_leaves(trained))).dtype
    out: dict[str, np.ndarray] = {}
    for kind, part in _parts(state, jax.tree_util.tree_structure(trained)):
        if jax.tree_util.tree_structure(part).num_leaves == 1 and np.ndim(part) == 0:
            named = {name: np.asarray(part) for name in prepared.parameters}
        else:
            named = _named(prepared, part if whole is None else whole(part))
        out.update({key(name, kind): np.asarray(v, dtype)[None] for name, v in named.items()})
    return out


def _parts(state: Any, treedef: Any, path: tuple = ()) -> list[tuple[str, Any]]:
    """``(kind, part)`` of every part of an optax state (nested tuples and named tuples) shaped like
    the parameters or a scalar array: kind is its field's name (``mu``), the first of a name keeps it,
    a later one its dotted path (``2.count``)."""
    found: list[tuple[tuple, Any]] = []

    def walk(node: Any, at: tuple) -> None:
        fields = getattr(type(node), "_fields", None)
        for name, child in zip(fields or range(len(node)), node, strict=True):
            if jax.tree_util.tree_structure(child) == treedef or (
                hasattr(child, "shape") and np.ndim(child) == 0
            ):
                found.append(((*at, str(name)), child))
            elif isinstance(child, (tuple, list)):
                walk(child, (*at, str(name)))

    if isinstance(state, (tuple, list)):
        walk(state, path)
    out, seen = [], set()
    for where, part in found:
        kind = where[-1] if where[-1] not in seen else ".".join(where)
        seen.add(where[-1])
        out.append((kind, part))
    return out
