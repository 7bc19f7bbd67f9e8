"""The zero perturbations of the JAX side's cotangents (``jax_cotangents``), call by call: what each
intercepted module call adds to its first input and to its outputs' floating arrays, under what label.

A call outside any scan is labelled as the capture labels it (``name``, ``name#k``: ``steps.label``).
A call inside a scan's step (``nn.scan``, ``nnx.scan``, ``jax.lax.scan``, while ``steps.indexed``) is
traced once for every step: its perturbation has the scans' lengths as leading axes (one zero per step)
and the step adds the slice of its own index (``steps.where``), so each step's cotangent is exact. Its
label holds ``@*`` (``name@*``, nested scans ``name@*.*``) until the records are made, one per step, as
the capture names them (``name@2``: ``labels``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from crosscheck._types import PyTree
from crosscheck._workloads.port.sides import steps


@dataclasses.dataclass(frozen=True)
class Shape:
    """What one call perturbs: its class name, its first input and its outputs' floating arrays (their
    shapes as one step sees them, ``None`` when the first input is no floating array), and the lengths
    of the scans it runs in (outermost first; ``()`` outside any)."""

    kind: str
    first: jax.ShapeDtypeStruct | None
    outputs: tuple[jax.ShapeDtypeStruct, ...]
    lengths: tuple[int, ...] = ()

    def zeros(self) -> tuple[np.ndarray | None, tuple[np.ndarray, ...]]:
        """The call's perturbations, zeros (NumPy's: JAX's would compile a program per shape)."""

        def zero(aval: jax.ShapeDtypeStruct) -> np.ndarray:
            return np.zeros((*self.lengths, *aval.shape), aval.dtype)

        return (None if self.first is None else zero(self.first)), tuple(zero(o) for o in self.outputs)


class Calls:
    """One trace of the perturbed loss: with ``perturb`` (label -> ``Shape.zeros``'s pair, traced), each
    call's perturbations added; either way, each call's ``Shape`` written to ``shapes`` in the order the
    calls finish."""

    def __init__(self, perturb: dict[str, Any] | None, shapes: dict[str, Shape]) -> None:
        self.perturb, self.shapes = perturb, shapes
        # calls counted per trace of a scan's step (keyed by its index, held: an id is not reused)
        self._seen: list[tuple[Any, dict[str, int]]] = []

    def label(self, name: str) -> str:
        """The label of the call of module ``name`` now being made (counted: call it once a call)."""
        indices, _ = steps.where()
        step = indices[-1] if indices else None
        seen = next((s for key, s in self._seen if key is step), None)
        if seen is None:
            seen = {}
            self._seen.append((step, seen))
        base = name if not indices else f"{name}@{'.'.join('*' * len(indices))}"
        seen[base] = seen.get(base, 0) + 1
        return base if seen[base] == 1 else f"{base}#{seen[base]}"

    def entering(self, label: str, args: tuple) -> tuple:
        """``args`` with the call's input perturbation added to the first (where it fits)."""
        if self.perturb is None or label not in self.perturb:
            return args
        first = self.perturb[label][0]
        if first is None or not args or not floating(args[0]):
            return args
        added = _step(first)
        return (args[0] + added, *args[1:]) if added.shape == args[0].shape else args

    def leaving(self, label: str, kind: str, args: tuple, out: PyTree) -> PyTree:
        """``out`` with the call's output perturbations added; its shape noted either way (what a trace
        with ``perturb`` perturbed is thus told: each perturbation fits where the shapes are those it
        was made for)."""
        first = args[0] if args and floating(args[0]) else None
        _, lengths = steps.where()
        self.shapes[label] = Shape(kind, _aval(first), tuple(_aval(o) for o in floats(out)), lengths)
        if self.perturb is None or label not in self.perturb:
            return out
        perturbations = self.perturb[label][1]
        leaves, tree = jax.tree_util.tree_flatten(out)
        kept = [k for k, leaf in enumerate(leaves) if floating(leaf)]
        if len(kept) != len(perturbations):
            return out
        for k, p in zip(kept, perturbations, strict=True):
            added = _step(p)
            if leaves[k].shape == added.shape:
                leaves[k] = leaves[k] + added
        return jax.tree_util.tree_unflatten(tree, leaves)


def _step(perturbation: Any) -> Any:
    """The slice of a perturbation that the step being traced now adds (the whole outside a scan)."""
    indices, _ = steps.where()
    for index in indices:
        perturbation = perturbation[index]
    return perturbation


def labels(label: str, lengths: tuple[int, ...]) -> list[tuple[str, tuple[int, ...]]]:
    """The record names of ``label``'s calls, one per step (``name@*`` -> ``name@0``, ``name@1``, ...),
    each with its index into the perturbation's leading axes (``[(label, ())]`` outside a scan)."""
    if not lengths:
        return [(label, ())]
    stars = ".".join("*" * len(lengths))
    return [(label.replace(f"@{stars}", "@" + ".".join(map(str, i)), 1), i) for i in np.ndindex(*lengths)]


def floating(value: Any) -> bool:
    """Whether ``value`` is an array of floating or complex numbers."""
    return hasattr(value, "dtype") and hasattr(value, "shape") and jnp.issubdtype(value.dtype, jnp.inexact)


def floats(value: Any) -> list[Any]:
    """The floating arrays of ``value``, in its leaves' order."""
    return [leaf for leaf in jax.tree_util.tree_leaves(value) if floating(leaf)]


def _aval(value: Any) -> jax.ShapeDtypeStruct | None:
    return None if value is None else jax.ShapeDtypeStruct(value.shape, value.dtype)
