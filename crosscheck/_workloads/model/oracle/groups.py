"""Screening every tensor at once: a group of tensors taken as one vector, halved where it fails.

A ``Group`` is a tuple of parameter names taken as one flat vector (``JOINT``). Its directions are random
``+-1`` signs on every entry of every tensor of the group, each entry scaled by its own tensor's RMS (as
a tensor's own directions are), from a seed fixed by the group: every function and candidate of a run is
screened along the same directions. The loss along them is the loss of the whole parameter dict with
the group's tensors replaced by the pieces of the vector, so a group's directional derivative costs
what one tensor's does (``stencil.evaluations``), whatever the number of tensors in it.

The judge screens the group of every tensor first; where a direction disagrees it halves the group
(``halves``: tensors in declaration order, neighbours together) and screens each half, down to single
tensors, which are then localized as before (``model.groups``). ``joint`` makes a group's function of an
implementation's batched loss (``oracle.batched``) batched too.
"""

from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from crosscheck._workloads.model.oracle.batched import Batched
from crosscheck._workloads.model.oracle.directions import SEED, Direction
from crosscheck._workloads.model.oracle.entries import base_steps
from crosscheck._workloads.model.oracle.sums import Steps, reader, runs

#: The name of a group's tensors taken as one vector.
JOINT = "(group)"


@dataclasses.dataclass(frozen=True)
class Group:
    """Tensors ``names`` of ``shapes`` taken as one vector, in that order."""

    names: tuple[str, ...]
    shapes: tuple[tuple[int, ...], ...]

    @classmethod
    def of(cls, names, shapes: Mapping[str, tuple[int, ...]]) -> Group:
        return cls(tuple(names), tuple(tuple(shapes[k]) for k in names))

    @property
    def sizes(self) -> list[int]:
        return [int(np.prod(s)) for s in self.shapes]

    def flat(self, arrays: Mapping[str, Any]) -> np.ndarray:
        """The group's pieces of ``arrays`` (each broadcast to its tensor's shape) as one float64 vector."""
        if not self.names:
            return np.zeros(0)
        return np.concatenate(
            [
                np.broadcast_to(np.asarray(arrays[k], np.float64), s).ravel()
                for k, s in zip(self.names, self.shapes, strict=True)
            ]
        )

    def joint(self, arrays: Mapping[str, Any]) -> Joint:
        """``flat(arrays)``, never made whole: read a block at a time (``Joint``)."""
        return Joint(self, arrays)

    def pieces(self, vector: np.ndarray) -> dict[str, np.ndarray]:
        """``vector`` cut back into the group's tensors (views)."""
        ends = np.cumsum(self.sizes)[:-1]
        return {
            k: part.reshape(s)
            for k, part, s in zip(self.names, np.split(vector, ends), self.shapes, strict=True)
        }

    def function(self, fn: Callable[[dict], Any], params: dict[str, np.ndarray]) -> Callable[[dict], Any]:
        """``fn`` of the group's vector (``{JOINT: vector}``), the other tensors at ``params``."""

        def joint(p: dict[str, np.ndarray]) -> object:
            return fn({**params, **self.pieces(p[JOINT])})

        return joint

    def directions(self, params: dict[str, np.ndarray], count: int) -> list[Direction]:
        """``count`` random +-1 directions over the group, each entry scaled by its tensor's RMS (of
        ``params`` in float64: the point's own parameters are cast a block at a time, ``base_steps``)."""
        steps = base_steps(params)
        step = Steps([steps[k] for k in self.names], self.sizes)  # each tensor's RMS over its entries
        rng = np.random.default_rng([SEED, zlib.crc32("\0".join(self.names).encode())])
        return [Direction(JOINT, _signs(rng, step.size), step) for _ in range(count)]

    def halves(self) -> tuple[Group, Group]:
        """The group cut in two, in order, the halves as equal in tensors as can be."""
        middle = (len(self.names) + 1) // 2
        return Group(self.names[:middle], self.shapes[:middle]), Group(
            self.names[middle:], self.shapes[middle:]
        )


def drawn(cache: dict, group: Group, params: dict, count: int, source: Any) -> list[Direction]:
    """``group.directions(params, count)``, drawn once per point (``source``, its parameters: the same
    object) and kept in ``cache`` (``Differencing.drawn``): the same arrays, to the bit, for every function
    differenced at that point (the signs and the steps, 12 bytes a parameter per function,
    drawn and held once a run, not once a function). The arrays are read-only: what reads them cannot
    change them for the next function."""
    key = (group, count)
    held = cache.get(key)
    if held is not None and held[0] is source:
        return held[1]
    dirs = group.directions(params, count)
    for d in dirs:
        for array in (d.signs, d.step):
            if isinstance(array, np.ndarray):
                array.flags.writeable = False  # a ``Steps``'s numbers are read-only already
    cache[key] = (source, dirs)
    return dirs


def _signs(rng: np.random.Generator, size: int) -> np.ndarray:
    """``(rng.integers(0, 2, size, dtype=np.int8) * 2 - 1).astype(np.int8)``, the draw's own array made
    the signs in place (no three temporaries of the group's size)."""
    signs = rng.integers(0, 2, size=size, dtype=np.int8)
    np.multiply(signs, 2, out=signs)
    np.subtract(signs, 1, out=signs)
    return signs


class Joint:
    """A group's pieces of ``arrays`` as one float64 vector, ``Group.flat``'s, made a block of entries at
    a time where it is read (``block``: ``oracle.sums``), or whole (``np.asarray``) where something reads
    it whole (a float64 copy of every gradient, rounding and floor of the model per
    comparison). An array of a tensor's shape is read in place, a term made when read
    (``crosscheck._compare.record.Made``) a block at a time, anything else broadcast to its tensor."""

    def __init__(self, group: Group, arrays: Mapping[str, Any]) -> None:
        self.group = group
        self.reads = [reader(_made(arrays, k), s) for k, s in zip(group.names, group.shapes, strict=True)]
        self.ends = np.cumsum([0, *group.sizes])
        self.size = int(self.ends[-1])
        self.shape = (self.size,)
        self._arrays = arrays

    def block(self, a: int, b: int) -> np.ndarray:
        """Entries ``a`` to ``b`` of the vector, float64."""
        parts = [
            np.asarray(self.reads[i](at - int(self.ends[i]), end - int(self.ends[i])), np.float64)
            for i, at, end in runs(self.ends, a, b)
        ]
        if len(parts) == 1:
            return parts[0]
        return np.concatenate(parts) if parts else np.zeros(0)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        out = self.group.flat(self._arrays)
        return out if dtype is None else out.astype(dtype, copy=False)


def _made(arrays: Mapping[str, Any], k: str) -> object:
    """``arrays[k]``, or its ``Made`` where ``arrays`` makes it when read (``made``: a term a block at a
    time, the same numbers)."""
    made = getattr(arrays, "made", None)
    return made(k) if callable(made) else arrays[k]


def joint(batched: Batched, group: Group, params: dict[str, np.ndarray]) -> Batched:
    """``batched`` as a function of a group's vector (``{JOINT: vector}``), the other tensors at
    ``params``: each point's vector cut back into the group's tensors (``oracle.batched``)."""
    one = group.function(batched.one, params)

    def many(p: dict[str, np.ndarray], _: tuple[str, ...]) -> object:
        vectors = p[JOINT]
        ends = np.cumsum(group.sizes)[:-1]
        pieces = {
            k: part.reshape(len(vectors), *s)
            for k, part, s in zip(group.names, np.split(vectors, ends, axis=1), group.shapes, strict=True)
        }
        return batched.many({**params, **pieces}, group.names)

    return _Shared(Batched(one, many), batched)


class _Shared(Batched):
    """A view of another ``Batched`` (a group's function of an implementation's loss) that shares its
    fallback and counts: a model found not batchable stays so for every group."""

    def __init__(self, own: Batched, parent: Batched) -> None:
        super().__init__(own.one, own.many)
        self.parent = parent
        self.fallback = parent.fallback

    def _batch(self, part, perturb, work, views, varying):
        self.fallback = self.parent.fallback
        if self.fallback is not None:
            return None
        values = super()._batch(part, perturb, work, views, varying)
        self.parent.fallback = self.fallback
        if values is not None:
            self.parent.calls += 1
            self.parent.points += len(part)
        return values
