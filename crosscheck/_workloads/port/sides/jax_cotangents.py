"""The JAX side's cotangents: the gradient of the port's loss with respect to each Flax module's output
and to its first input, taken exactly, without a callback: at each submodule call the capture
intercepts (a linen module's through ``flax.linen.intercept_methods``, ``linen``; an nnx module's by
its classes' ``__call__``, ``nnx_cotangents``), a zero perturbation is added to the module's first
positional input (as the module sees it) and to each floating array of its output, and the loss is
differentiated with respect to the perturbations at zero. The perturbation of an output gives the
gradient reaching it; that of an input the gradient leaving it through this module's backward alone, as
PyTorch's full backward hooks give it. The perturbed loss is traced once a check (``jax.make_jaxpr``)
and that trace is differentiated and compiled (``Kept``: a program compiled in an earlier check runs
only where it is the same); the calls' shapes, which the zeros are made for, are found by a shape
pass of their own in a first check, or where this check's trace meets other calls than the last's.

A call made inside a scan's step (``nn.scan``, ``nnx.scan``, ``jax.lax.scan``) is perturbed with one
zero per step, each step adding its own slice (``perturbations``): one record per step, named as the
capture names it (``layers.fc1@2``). The modules that run a ``jax.custom_vjp`` or ``jax.custom_jvp`` (a
custom op: its derivative written by hand) are read from the jaxpr of the perturbed loss
(``custom_ops``): a custom call downstream of a module's input perturbation and upstream of its
output's, a jitted or checkpointed call read through, a scan's body for the calls of its step. Imported
only by the port's backward localisation (it imports jax and flax).
"""

from __future__ import annotations

import contextlib
import dataclasses
import weakref
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any

import jax
import numpy as np
from jax.extend.core import Literal, jaxpr_as_fun

from crosscheck._types import FrameworkArray, PyTree
from crosscheck._workloads.port.sides import perturbations, steps
from crosscheck._workloads.port.sides.torch_side import ModuleCall
from crosscheck._workloads.programs import Kept

#: The primitives of a derivative written by hand, by what the verdict calls them.
CUSTOM = {"custom_vjp_call": "jax.custom_vjp", "custom_jvp_call": "jax.custom_jvp"}


@dataclasses.dataclass(frozen=True)
class _Tag:
    """Which perturbation a leaf is: ``label``'s input (``output`` False) or one of its outputs, made
    inside ``depth`` scans."""

    label: str
    output: bool
    depth: int = 0


#: How a port's module calls are intercepted while its loss runs: given the trace's ``Calls``, a
#: context inside which each submodule call is labelled, perturbed and noted through it.
Intercept = Callable[[perturbations.Calls], AbstractContextManager[None]]


def cotangents(
    loss: Callable[[dict, dict], Any],
    params: dict[str, Any],
    inputs: dict[str, Any],
    kept: Kept | None = None,
    intercept: Intercept | None = None,
) -> tuple[list[ModuleCall], dict[str, tuple[str, ...]]]:
    """Every submodule call's cotangents (see the module docstring) in the order the calls finished
    (a scan's step's calls: one record per step, ``name@i``), and by call label the kinds of custom op
    it runs. ``loss``: the port's JAX loss, ``(params, inputs) -> scalar``
    (``build.jax_implementation``); ``kept``: where the compiled gradient is kept for the next check (a
    new one: not kept); ``intercept``: how its module calls are intercepted (a Flax linen module's when
    None: ``linen``)."""
    intercept = intercept or linen
    kept = kept or Kept()
    noted = _NOTED.get(kept)  # the calls the last check met: this check's trace tells if they stand
    traced = None if noted is None else _traced(loss, params, inputs, intercept, noted)
    if noted is not None and traced is not None and list(traced[2].items()) == list(noted.items()):
        shapes = noted
    else:  # found afresh
        shapes = {}
        with steps.indexed():
            jax.eval_shape(lambda p, i: _perturbed(loss, None, shapes, intercept)(p, i), params, inputs)
        traced = _traced(loss, params, inputs, intercept, shapes)
    closed, zeros, _ = traced
    _NOTED[kept] = shapes
    # this check's trace differentiated: the model is traced once (a scanned model's lifted scan, traced
    # again under the gradient, costs more than the jaxpr's)
    run = jaxpr_as_fun(closed)

    def perturbed(zeros: PyTree, p: PyTree, i: PyTree) -> FrameworkArray:
        return run(*jax.tree_util.tree_leaves((zeros, p, i)))[0]

    grads = kept(jax.grad(perturbed), zeros, params, inputs)
    tags = {
        label: (
            None if shape.first is None else _Tag(label, False, len(shape.lengths)),
            tuple(_Tag(label, True, len(shape.lengths)) for _ in shape.outputs),
        )
        for label, shape in shapes.items()
    }
    found = custom_ops(closed.jaxpr, jax.tree_util.tree_leaves(tags))
    records = []
    for label, shape in shapes.items():
        first, outs = grads[label]
        for name, at in perturbations.labels(label, shape.lengths):
            ins = () if first is None else (_numpy(first[at]),)
            records.append(ModuleCall(name, shape.kind, ins, tuple(_numpy(g[at]) for g in outs)))
            if label in found and name != label:
                found[name] = found[label]
    return records, {k: v for k, v in found.items() if "@*" not in k}


#: By kept program, the calls' shapes its last check perturbed: the next check's trace is made with
#: them, and kept only where it meets the very same calls (``_traced``).
_NOTED: weakref.WeakKeyDictionary[Kept, dict[str, perturbations.Shape]] = weakref.WeakKeyDictionary()


def _traced(
    loss: Callable[[dict, dict], Any],
    params: dict[str, Any],
    inputs: dict[str, Any],
    intercept: Intercept,
    shapes: dict[str, perturbations.Shape],
) -> tuple[Any, dict[str, Any], dict[str, perturbations.Shape]]:
    """The perturbed loss's closed jaxpr (of perturbations, params, inputs), traced with a zero
    perturbation of each of ``shapes``' calls; those zeros; and the calls' shapes as this trace met
    them. A perturbation that does not fit a call is not added (``perturbations.Calls``), and that
    call's cotangents would be zeros, never measured: the trace is used only where it met the very
    calls of ``shapes``, in the same order."""
    zeros = {label: shape.zeros() for label, shape in shapes.items()}
    met: dict[str, perturbations.Shape] = {}

    def perturbed(zeros: PyTree, p: PyTree, i: PyTree) -> FrameworkArray:
        return _perturbed(loss, zeros, met, intercept)(p, i)

    with steps.indexed():
        closed = jax.make_jaxpr(perturbed)(zeros, params, inputs)
    return closed, zeros, met


def _perturbed(
    loss: Callable[[dict, dict], Any], perturb: dict | None, shapes: dict, intercept: Intercept
) -> Callable[[dict, dict], Any]:
    """``loss`` with each submodule call intercepted (``intercept``): with ``perturb``, its
    perturbations added; without, the shape of what it would perturb written to ``shapes``
    (``perturbations.Calls``)."""

    def run(params: dict, inputs: dict) -> PyTree:
        with intercept(perturbations.Calls(perturb, shapes)):
            return loss(params, inputs)

    return run


@contextlib.contextmanager
def linen(calls: perturbations.Calls) -> Iterator[None]:
    """A Flax linen module's submodule calls intercepted (``flax.linen.intercept_methods``): each
    ``__call__`` of a submodule (the model itself left out; a module's own ``__call__`` inside its
    ``__call__``, ``super().__call__``, is one call) labelled and perturbed by ``calls``."""
    import flax.linen as nn

    calling: list[int | None] = []

    def record(next_fun: Callable, args: Any, kwargs: Any, context: Any) -> PyTree:
        module, method = context.module, context.method_name
        again = method == "__call__" and id(module) in calling
        wanted = method == "__call__" and not again and bool(module.path)
        label = calls.label(".".join(module.path)) if wanted else ""
        calling.append(id(module) if method == "__call__" else None)
        try:
            out = next_fun(*(calls.entering(label, args) if wanted else args), **kwargs)
        finally:
            calling.pop()
        return calls.leaving(label, type(module).__name__, args, out) if wanted else out

    with nn.intercept_methods(record):
        yield


def custom_ops(jaxpr: Any, tags: list[Any]) -> dict[str, tuple[str, ...]]:
    """By call label, the kinds of custom op (``CUSTOM``) the call runs: an equation of one, directly or
    in a nested jaxpr, that depends on the call's input perturbation and feeds its output's. ``tags``:
    the ``_Tag`` of each of the jaxpr's first input variables (the perturbations, flattened). A call in
    a scan's step is judged in the scan's body, where its perturbations are added."""
    found = _found(jaxpr, dict(zip(jaxpr.invars, tags, strict=False)), 0)
    return {label: tuple(sorted(k)) for label, k in found.items() if k}


#: The primitives that call a jaxpr once, on their own inputs (a jitted function, a checkpointed one):
#: read through, as if their equations were inlined.
_CALLS = ("jit", "pjit", "remat", "remat2", "checkpoint", "closed_call", "core_call")


#: The primitives that take a scan's step's slice of a perturbation (``perturbations``: ``p[index]``):
#: the slice is the perturbation the step adds.
_SLICING = ("dynamic_slice", "squeeze", "reshape", "gather", "slice")


@dataclasses.dataclass
class _Walk:
    """``_found``'s state: by variable, the perturbations it depends on (bits of ``inputs``' indices)
    and the custom equations above it; the custom equations' dependencies and kinds; the
    perturbations by variable, as they are passed into the jaxprs read through."""

    tagged: dict[Any, _Tag]
    depth: int
    inputs: dict[str, int] = dataclasses.field(default_factory=dict)
    deps: dict[Any, int] = dataclasses.field(default_factory=dict)
    above: dict[Any, frozenset[int]] = dataclasses.field(default_factory=dict)
    kinds: dict[int, tuple[int, str]] = dataclasses.field(default_factory=dict)
    found: dict[str, set[str]] = dataclasses.field(default_factory=dict)


def _found(jaxpr: Any, tagged: dict[Any, _Tag], depth: int) -> dict[str, set[str]]:
    """``custom_ops``'s kinds, by label, of the calls made ``depth`` scans deep, in ``jaxpr`` whose
    variables ``tagged`` are perturbations (a scan's body: recursed into, one scan deeper)."""
    walk = _Walk(dict(tagged), depth)
    mine = [v for v, t in tagged.items() if t.depth == depth]
    walk.inputs = {tagged[v].label: k for k, v in enumerate(mine) if not tagged[v].output}
    walk.deps = {v: 1 << k for k, v in enumerate(mine)}
    _eqns(jaxpr.eqns, walk)
    return walk.found


def _eqns(eqns: Any, walk: _Walk) -> None:
    """``_found``'s walk over ``eqns``, in order (a call's jaxpr read through: ``_CALLS``)."""
    for eqn in eqns:
        held = [v for v in eqn.invars if not isinstance(v, Literal)]
        inner = eqn.params.get("jaxpr")
        inner = getattr(inner, "jaxpr", inner)
        if eqn.primitive.name == "scan":
            pairs = zip(eqn.invars, inner.invars, strict=True)
            into = {b: walk.tagged[v] for v, b in pairs if not isinstance(v, Literal) and v in walk.tagged}
            for label, got in _found(inner, into, walk.depth + 1).items():
                walk.found.setdefault(label, set()).update(got)
        elif eqn.primitive.name in _CALLS and hasattr(inner, "eqns"):
            for v, b in zip(eqn.invars, inner.invars, strict=True):
                if not isinstance(v, Literal):
                    walk.deps[b], walk.above[b] = walk.deps.get(v, 0), walk.above.get(v, frozenset())
                    if v in walk.tagged:
                        walk.tagged[b] = walk.tagged[v]
            _eqns(inner.eqns, walk)
            for v, b in zip(eqn.outvars, inner.outvars, strict=True):
                literal = isinstance(b, Literal)
                walk.deps[v] = 0 if literal else walk.deps.get(b, 0)
                walk.above[v] = frozenset() if literal else walk.above.get(b, frozenset())
            continue
        _equation(eqn, held, walk)


def _equation(eqn: Any, held: list[Any], walk: _Walk) -> None:
    """One equation of ``_found``'s walk: what its outputs depend on; the custom ops a perturbation it
    adds (a call's output's) is fed by, where they depend on that call's input perturbation."""
    mask = 0
    ups: frozenset[int] = frozenset()
    for v in held:
        mask |= walk.deps.get(v, 0)
        ups |= walk.above.get(v, frozenset())
    kind = _kind(eqn)
    if kind:
        walk.kinds[id(eqn)] = (mask, kind)
        ups |= {id(eqn)}
    for v in eqn.outvars:
        walk.deps[v], walk.above[v] = mask, ups
    if eqn.primitive.name in _SLICING and held and held[0] in walk.tagged:  # a step's own slice
        walk.tagged[eqn.outvars[0]] = walk.tagged[held[0]]
    for v in held:
        tag = walk.tagged.get(v)
        if tag is None or not tag.output or tag.depth != walk.depth or tag.label not in walk.inputs:
            continue
        bit = 1 << walk.inputs[tag.label]
        walk.found.setdefault(tag.label, set()).update(
            walk.kinds[c][1] for c in ups if walk.kinds[c][0] & bit
        )


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


def _numpy(value: Any) -> np.ndarray:
    return np.asarray(value).astype(np.float64)
