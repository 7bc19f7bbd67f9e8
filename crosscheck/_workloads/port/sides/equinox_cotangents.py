"""The cotangents of an Equinox port's module calls (``jax_cotangents``'s perturbations). An Equinox
module is a pytree rebuilt from its arrays wherever it is called (a scan's step combines a layer from
its slice), so a call cannot be told by the object: while the port's loss runs, the side rebuilds its
model from a tree (``labelled``) in which every submodule that has a ``__call__`` is an instance of a
subclass of its own class, made once per class and path, whose ``__call__`` labels the call by the
submodule's path in the module tree (``blocks.0.fc1``, as PyTorch names its modules) and perturbs it
through the trace's ``Calls`` (``intercept``); the class travels in the tree's structure, through
``eqx.partition`` and ``eqx.combine``, a scan's steps included (labelled ``name@i``, ``steps``).

A submodule mapped over a batch by ``jax.vmap`` itself (``jax.vmap(self.fc1)(x)``, or
``jax.vmap(jax.vmap(self.fc1))``, each over the leading axis of its first input and of its outputs)
is perturbed outside the map, on the batch's arrays (``_outside``): that is its call on the batch, as
PyTorch's module makes it. Not perturbed: the model itself, a call inside a module's own call
(``super().__call__``), and any other call made under ``jax.vmap`` (``eqx.filter_vmap`` calls it too;
a map of the model, or of a function that calls the module): one batch element's zero would stand for
the whole batch, its gradient the batch's sum; nor one in a loop whose body is traced once for all its
steps (``jax.lax.map``, ``fori_loop``, ``while_loop``: ``UNINDEXED``). While the loss is traced those
say when their function is being traced (``mapping``), and a call whose input is one of vmap's tracers
is left out too (a function mapped before the trace). Imported only by the port's backward localisation
(it imports equinox).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import equinox as eqx
import jax

from crosscheck._types import PyTree
from crosscheck._workloads.port.sides import perturbations, steps
from crosscheck._workloads.port.sides.jax_side import key_name


@dataclasses.dataclass
class Seen:
    """The submodule calls left out, by path: the transform each ran under (``jax.vmap``, or a loop
    whose steps are not indexed: ``UNINDEXED``)."""

    mapped: dict[str, str] = dataclasses.field(default_factory=dict)


#: The loops whose body is traced once for all its steps, not indexed as ``jax.lax.scan``'s are
#: (``steps.indexed``): a zero added in the body would stand for every step.
UNINDEXED = ("map", "fori_loop", "while_loop")
#: The trace's calls being perturbed and where its calls left out are noted (the innermost last), and
#: the modules calling now.
_CALLS: list[perturbations.Calls] = []
_SEEN: list[Seen] = []
_ACTIVE: set[int] = set()
#: The transforms whose function is being traced now (``mapping``), the innermost last.
_MAPS: list[str] = []
#: The labelled subclasses, by class and path: made once, so that a model labelled again has the same
#: tree structure (its compiled gradient is run again, not compiled anew); and the path of each.
_MADE: dict[tuple[type, str], type] = {}
_PATHS: dict[type, str] = {}


@contextlib.contextmanager
def labelled(side: Any) -> Iterator[None]:
    """While inside, the Equinox ``side`` (a ``JaxSide``) rebuilds its model with every submodule's
    class the labelled subclass of its path; its own classes on leaving (the user's model is never
    changed: the labelled trees are copies)."""
    before = side.treedef, side.static
    model = _marked(side.model, ())
    arrays, _ = eqx.partition(model, eqx.is_inexact_array)
    side.treedef, side.static = jax.tree_util.tree_structure(arrays), _marked(side.static, ())
    try:
        yield
    finally:
        side.treedef, side.static = before


def intercept(seen: Seen) -> Callable[[perturbations.Calls], contextlib.AbstractContextManager[None]]:
    """How a labelled model's calls are intercepted for ``jax_cotangents.cotangents``; the paths of the
    calls left out under ``jax.vmap`` are added to ``seen``."""

    @contextlib.contextmanager
    def wrapped(calls: perturbations.Calls) -> Iterator[None]:
        _CALLS.append(calls)
        _SEEN.append(seen)
        try:
            with mapping():
                yield
        finally:
            _CALLS.pop()
            _SEEN.pop()

    return wrapped


@contextlib.contextmanager
def mapping() -> Iterator[None]:
    """While inside, each function ``jax.vmap`` maps, and each loop of ``UNINDEXED``, says its name in
    ``_MAPS`` while it runs (traced); they are restored on leaving."""
    original = jax.vmap
    loops = {name: getattr(jax.lax, name) for name in UNINDEXED}

    def vmap(fun: Callable, *args: Any, **kwargs: Any) -> Callable:
        return _outside(fun, _under("jax.vmap", original(fun, *args, **kwargs)), args, kwargs)

    jax.vmap = vmap
    for name, loop in loops.items():
        setattr(jax.lax, name, _under(f"jax.lax.{name}", loop))
    try:
        yield
    finally:
        jax.vmap = original
        for name, loop in loops.items():
            setattr(jax.lax, name, loop)


def _outside(fun: Callable, run: Callable, args: tuple, kwargs: dict) -> Callable:
    """``run`` (``jax.vmap`` of ``fun``), which, where ``fun`` is a labelled submodule (or ``jax.vmap``
    of one, mapped so) mapped over the leading axis of its first input and of its outputs, is that
    module's call on the batch: called outside any map, it is perturbed there, the batch's arrays as
    they are (the module's own call inside is not perturbed again: ``_ACTIVE``)."""
    module = fun if isinstance(fun, eqx.Module) else getattr(fun, "crosscheck_module", None)
    in_axes = args[0] if args else kwargs.get("in_axes", 0)
    out_axes = args[1] if len(args) > 1 else kwargs.get("out_axes", 0)
    first = in_axes[0] if isinstance(in_axes, (tuple, list)) and in_axes else in_axes
    path = _PATHS.get(type(module))
    if path is None or not (_is_zero(first) and _is_zero(out_axes)):
        return run

    def outside(*a: Any, **k: Any) -> PyTree:
        return run(*a, **k) if _MAPS else _called(path, run, module, a, k)

    outside.crosscheck_module = module  # type: ignore[attr-defined]
    return outside


def _is_zero(axis: Any) -> bool:
    return isinstance(axis, int) and not isinstance(axis, bool) and axis == 0


def _under(name: str, run: Callable) -> Callable:
    """``run``, saying ``name`` in ``_MAPS`` while it runs."""

    def under(*args: Any, **kwargs: Any) -> PyTree:
        _MAPS.append(name)
        try:
            return run(*args, **kwargs)
        finally:
            _MAPS.pop()

    return under


def _called(path: str, call: Callable, module: Any, args: tuple, kwargs: dict) -> PyTree:
    """A labelled submodule's call: perturbed through the trace's ``Calls`` (see the module docstring),
    or made as it is."""
    if not _CALLS or id(module) in _ACTIVE:
        return call(*args, **kwargs)
    if _MAPS or steps.vmapped((args, kwargs)):
        _SEEN[-1].mapped.setdefault(path, _MAPS[-1] if _MAPS else "jax.vmap")
        return call(*args, **kwargs)
    calls = _CALLS[-1]
    label = calls.label(path)
    _ACTIVE.add(id(module))
    try:
        out = call(*calls.entering(label, args), **kwargs)
    finally:
        _ACTIVE.discard(id(module))
    return calls.leaving(label, type(module).__name__, args, out)


def _marked(node: PyTree, path: tuple[str, ...]) -> PyTree:
    """``node`` (a module, or a value holding modules) with every module below ``path`` made again as an
    instance of its labelled subclass (``_labelled``; a module without a ``__call__`` keeps its class),
    its fields marked in turn; the module at the empty path (the model) keeps its class."""

    def inner(at: tuple, value: PyTree) -> PyTree:
        return _module(value, (*path, *(key_name(k) for k in at))) if isinstance(value, eqx.Module) else value

    if isinstance(node, eqx.Module):
        return _module(node, path)
    return jax.tree_util.tree_map_with_path(inner, node, is_leaf=lambda v: isinstance(v, eqx.Module))


def _module(node: Any, path: tuple[str, ...]) -> PyTree:
    """One module made again (see ``_marked``): a new instance of its class or labelled subclass, each
    field set to its marked value (the dataclass's fields, as Equinox's own rebuild sets them)."""
    cls = type(node)
    made = _labelled(cls, ".".join(path)) if path and _has_call(cls) else cls
    new: Any = object.__new__(made)
    for field in dataclasses.fields(node):
        object.__setattr__(new, field.name, _marked(getattr(node, field.name), (*path, field.name)))
    return new


def _has_call(cls: type) -> bool:
    """Whether instances of ``cls`` are callable (a ``__call__`` of its own or inherited)."""
    return any("__call__" in c.__dict__ for c in cls.__mro__ if c is not object)


def _labelled(cls: type, path: str) -> type:
    """The subclass of ``cls`` whose calls are labelled ``path`` (made once per class and path)."""
    key = (cls, path)
    if key not in _MADE:

        class Labelled(cls):
            def __call__(self, *args: Any, **kwargs: Any) -> PyTree:
                return _called(path, super().__call__, self, args, kwargs)

        Labelled.__name__, Labelled.__qualname__ = cls.__name__, cls.__qualname__
        Labelled.__module__ = cls.__module__
        _MADE[key], _PATHS[Labelled] = Labelled, path
    return _MADE[key]
