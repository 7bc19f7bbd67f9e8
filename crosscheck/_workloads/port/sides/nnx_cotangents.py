"""The cotangents of a Flax nnx port's module calls (``jax_cotangents``'s perturbations): while the
port's loss runs, each class of the model's modules has its ``__call__`` wrapped (``nnx_side.patched``)
so that every call of a submodule is labelled by its path and perturbed, a scan's step's calls too
(``nnx.scan`` runs copies of the modules, which keep their path: ``nnx_side.labelled``). The model
itself, a call inside a module's own call (``super().__call__``) and a call of one batch element
(``nnx.vmap``: its perturbation would be the whole batch's) are not perturbed.

Imported only by the port's backward localisation (it imports flax).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any

from flax import nnx

from crosscheck._workloads.port.sides import nnx_side, perturbations, steps


@contextlib.contextmanager
def labelled(side: Any) -> Iterator[None]:
    """While inside, the nnx ``side`` (a ``JaxSide``) rebuilds its model from a graph whose modules
    carry their paths (``nnx_side.labelled``); its own on leaving."""
    before = side.static
    side.static = nnx_side.labelled(side.model, before)
    try:
        yield
    finally:
        side.static = before


def intercept(model: Any) -> Callable[[perturbations.Calls], contextlib.AbstractContextManager[None]]:
    """How the calls of ``model``'s modules (and of the modules merged from its graph) are intercepted
    for ``jax_cotangents.cotangents``."""
    modules = [node for _, node in nnx.iter_graph(model) if isinstance(node, nnx.Module)]

    @contextlib.contextmanager
    def wrapped(calls: perturbations.Calls) -> Iterator[None]:
        active: set[int] = set()

        def wrap(original: Callable) -> Callable:
            @functools.wraps(original)
            def call(self: Any, *args: Any, **kwargs: Any) -> Any:
                name = getattr(self, nnx_side.PATH, None)
                if not isinstance(name, str) or not name or id(self) in active or steps.vmapped(args):
                    return original(self, *args, **kwargs)
                label = calls.label(name)
                active.add(id(self))
                try:
                    out = original(self, *calls.entering(label, args), **kwargs)
                finally:
                    active.discard(id(self))
                return calls.leaving(label, type(self).__name__, args, out)

            return call

        with nnx_side.patched(modules, wrap):
            yield

    return wrapped
