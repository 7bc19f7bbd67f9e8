"""The JAX side's cotangents: the gradient of the port's loss with respect to each Flax linen module's
output and to its first input, taken exactly, without a callback: at each submodule call the capture
intercepts (``flax.linen.intercept_methods``), a zero perturbation is added to the module's first
positional input (as the module sees it) and to each floating array of its output, and the loss is
differentiated with respect to the perturbations at zero. The perturbation of an output gives the
gradient reaching it; that of an input the gradient leaving it through this module's backward alone, as
PyTorch's full backward hooks give it.

A call made inside a scan's step (``nn.scan``) is left out: one perturbation would stand for every
step. The modules that run a ``jax.custom_vjp`` or ``jax.custom_jvp`` (a custom op: its derivative
written by hand) are read from the jaxpr of the perturbed loss (``custom_ops``): a custom call
downstream of a module's input perturbation and upstream of its output's. Imported only by the port's
backward localisation (it imports jax and flax).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend.core import Literal

from crosscheck._types import FrameworkArray, PyTree
from crosscheck._workloads.port.sides import steps
from crosscheck._workloads.port.sides.torch_side import ModuleCall
from crosscheck._workloads.programs import Kept

#: The primitives of a derivative written by hand, by what the verdict calls them.
CUSTOM = {"custom_vjp_call": "jax.custom_vjp", "custom_jvp_call": "jax.custom_jvp"}


@dataclasses.dataclass(frozen=True)
class _Tag:
    """Which perturbation a leaf is: ``label``'s input (``output`` False) or one of its outputs."""

    label: str
    output: bool


def cotangents(
    loss: Callable[[dict, dict], Any],
    params: dict[str, Any],
    inputs: dict[str, Any],
    kept: Kept | None = None,
) -> tuple[list[ModuleCall], dict[str, tuple[str, ...]]]:
    """Every linen submodule call's cotangents (see the module docstring) in the order the calls
    finished, and by call label the kinds of custom op it runs. ``loss``: the port's JAX loss,
    ``(params, inputs) -> scalar`` (``build.jax_implementation``), which calls the linen module;
    ``kept``: where the compiled gradient is kept for the next check (a new one: not kept)."""
    shapes: dict[str, tuple[str, Any, tuple[Any, ...]]] = {}
    with steps.indexed():
        jax.eval_shape(lambda p, i: _perturbed(loss, None, shapes)(p, i), params, inputs)
    # NumPy's zeros: JAX's would compile a program per shape on a first check
    zeros = {
        label: (
            None if first is None else np.zeros(first.shape, first.dtype),
            tuple(np.zeros(o.shape, o.dtype) for o in outs),
        )
        for label, (_, first, outs) in shapes.items()
    }

    def perturbed(zeros: PyTree, p: PyTree, i: PyTree) -> FrameworkArray:
        return _perturbed(loss, zeros, {})(p, i)

    with steps.indexed():
        grads = (kept or Kept())(jax.grad(perturbed), zeros, params, inputs)
        closed = jax.make_jaxpr(perturbed)(zeros, params, inputs)
    tags = {
        label: (None if first is None else _Tag(label, False), tuple(_Tag(label, True) for _ in outs))
        for label, (_, first, outs) in shapes.items()
    }
    found = custom_ops(closed.jaxpr, jax.tree_util.tree_leaves(tags))
    records = [
        ModuleCall(
            label, kind, () if grads[label][0] is None else (_numpy(grads[label][0]),), _outs(grads[label])
        )
        for label, (kind, _, _) in shapes.items()
    ]
    return records, found


def _outs(grads: tuple[Any, tuple[Any, ...]]) -> tuple[np.ndarray, ...]:
    return tuple(_numpy(g) for g in grads[1])


def _perturbed(
    loss: Callable[[dict, dict], Any], perturb: dict | None, shapes: dict
) -> Callable[[dict, dict], Any]:
    """``loss`` with each linen submodule call intercepted: with ``perturb``, its perturbations added;
    without, the shapes of what it would perturb written to ``shapes`` (label -> class name, first
    input, outputs), in the order the calls finish."""
    import flax.linen as nn

    def run(params: dict, inputs: dict) -> PyTree:
        seen: dict[str, int] = {}
        calling: list[int | None] = []

        def record(next_fun: Callable, args: Any, kwargs: Any, context: Any) -> PyTree:
            module, method = context.module, context.method_name
            # a module's own `__call__` inside its `__call__` (`super().__call__`) is one call; the model
            # itself and the calls in a scan's step are not perturbed (``_labelled``)
            again = method == "__call__" and id(module) in calling
            wanted = method == "__call__" and not again and bool(module.path) and not steps.scanning()
            calling.append(id(module) if method == "__call__" else None)
            try:
                if wanted and perturb is not None:
                    args = _first_added(args, perturb, seen, ".".join(module.path))
                out = next_fun(*args, **kwargs)
            finally:
                calling.pop()
            if not wanted:
                return out
            label = steps.label(seen, ".".join(module.path), None)
            if perturb is None:
                first = args[0] if args and _floating(args[0]) else None
                shapes[label] = (type(module).__name__, _aval(first), tuple(_aval(o) for o in _floats(out)))
                return out
            return _outputs_added(out, perturb.get(label, (None, ()))[1])

        with nn.intercept_methods(record):
            return loss(params, inputs)

    return run


def _first_added(args: tuple, perturb: dict, seen: dict[str, int], name: str) -> tuple:
    """``args`` with the call's input perturbation added to its first (the label the call will get)."""
    count = seen.get(name, 0) + 1
    label = name if count == 1 else f"{name}#{count}"
    first = perturb.get(label, (None, ()))[0]
    if first is None or not args or not _floating(args[0]) or args[0].shape != first.shape:
        return args
    return (args[0] + first, *args[1:])


def _outputs_added(out: PyTree, perturbations: tuple) -> PyTree:
    """``out`` with a perturbation added to each floating array, in order (none where they differ)."""
    leaves, tree = jax.tree_util.tree_flatten(out)
    floats = [k for k, leaf in enumerate(leaves) if _floating(leaf)]
    if len(floats) != len(perturbations):
        return out
    for k, p in zip(floats, perturbations, strict=True):
        if leaves[k].shape == p.shape:
            leaves[k] = leaves[k] + p
    return jax.tree_util.tree_unflatten(tree, leaves)


def custom_ops(jaxpr: Any, tags: list[Any]) -> dict[str, tuple[str, ...]]:
    """By call label, the kinds of custom op (``CUSTOM``) the call runs: an equation of one, directly or
    in a nested jaxpr, that depends on the call's input perturbation and feeds its output's. ``tags``:
    the ``_Tag`` of each of the jaxpr's first input variables (the perturbations, flattened)."""
    inputs = {t.label: k for k, t in enumerate(tags) if not t.output}
    outputs = {v: t.label for v, t in zip(jaxpr.invars, tags, strict=False) if t.output}
    deps: dict[Any, int] = {v: 1 << k for k, (v, t) in enumerate(zip(jaxpr.invars, tags, strict=False))}
    above: dict[Any, frozenset[int]] = {}
    kinds: dict[int, tuple[int, str]] = {}  # custom equation -> (its dependencies, its kind)
    found: dict[str, set[str]] = {}
    for k, eqn in enumerate(jaxpr.eqns):
        held = [v for v in eqn.invars if not isinstance(v, Literal)]
        mask = 0
        ups: frozenset[int] = frozenset()
        for v in held:
            mask |= deps.get(v, 0)
            ups |= above.get(v, frozenset())
        kind = _kind(eqn)
        if kind:
            kinds[k] = (mask, kind)
            ups |= {k}
        for v in eqn.outvars:
            deps[v], above[v] = mask, ups
        for v in held:
            label = outputs.get(v)
            if label is None or label not in inputs:
                continue
            bit = 1 << inputs[label]
            found.setdefault(label, set()).update(kinds[c][1] for c in ups if kinds[c][0] & bit)
    return {label: tuple(sorted(k)) for label, k in found.items() if k}


def _kind(eqn: Any) -> str:
    """The kind of custom op an equation is or holds in a nested jaxpr ("" when none)."""
    name = eqn.primitive.name
    for prefix, kind in CUSTOM.items():
        if name.startswith(prefix):
            return kind
    for value in eqn.params.values():
        inner = getattr(value, "jaxpr", value)
        if hasattr(inner, "eqns"):
            found = next((_kind(e) for e in inner.eqns if _kind(e)), "")
            if found:
                return found
    return ""


def _floating(value: Any) -> bool:
    return hasattr(value, "dtype") and hasattr(value, "shape") and jnp.issubdtype(value.dtype, jnp.inexact)


def _floats(value: Any) -> list[Any]:
    return [leaf for leaf in jax.tree_util.tree_leaves(value) if _floating(leaf)]


def _aval(value: Any) -> jax.ShapeDtypeStruct | None:
    return None if value is None else jax.ShapeDtypeStruct(value.shape, value.dtype)


def _numpy(value: Any) -> np.ndarray:
    return np.asarray(value).astype(np.float64)
