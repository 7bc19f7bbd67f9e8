"""Screening every tensor at once: a group of tensors taken as one vector, halved where it fails.

A ``Group`` is a tuple of parameter names taken as one flat vector (``JOINT``). Its directions are random
``+-1`` signs on every entry of every tensor of the group, each entry scaled by its own tensor's RMS (as
a tensor's own directions are), from a seed fixed by the group: every function and candidate of a run is
screened along the same directions. The loss along them is the loss of the whole parameter dict with
the group's tensors replaced by the pieces of the vector, so a group's directional derivative costs
what one tensor's does (``stencil.evaluations``), whatever the number of tensors in it.

The judge screens the group of every tensor first; where a direction disagrees it halves the group
(``halves``: tensors in declaration order, neighbours together) and screens each half, down to single
tensors, which are then localized as before (``model.groups``).
"""

from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from crosscheck._workloads.model.oracle.directions import SEED, Direction
from crosscheck._workloads.model.oracle.entries import base_steps

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

    def flat(self, arrays: dict[str, Any]) -> np.ndarray:
        """The group's pieces of ``arrays`` (each broadcast to its tensor's shape) as one float64 vector."""
        if not self.names:
            return np.zeros(0)
        return np.concatenate(
            [
                np.broadcast_to(np.asarray(arrays[k], np.float64), s).ravel()
                for k, s in zip(self.names, self.shapes, strict=True)
            ]
        )

    def pieces(self, vector: np.ndarray) -> dict[str, np.ndarray]:
        """``vector`` cut back into the group's tensors (views)."""
        ends = np.cumsum(self.sizes)[:-1]
        return {
            k: part.reshape(s)
            for k, part, s in zip(self.names, np.split(vector, ends), self.shapes, strict=True)
        }

    def function(self, fn: Callable[[dict], Any], params: dict[str, np.ndarray]) -> Callable[[dict], Any]:
        """``fn`` of the group's vector (``{JOINT: vector}``), the other tensors at ``params``."""

        def joint(p: dict[str, np.ndarray]) -> Any:
            return fn({**params, **self.pieces(p[JOINT])})

        return joint

    def directions(self, params: dict[str, np.ndarray], count: int) -> list[Direction]:
        """``count`` random +-1 directions over the group, each entry scaled by its tensor's RMS."""
        steps = base_steps({k: np.asarray(v, np.float64) for k, v in params.items()})
        step = np.concatenate([np.full(n, steps[k]) for k, n in zip(self.names, self.sizes, strict=True)])
        rng = np.random.default_rng([SEED, zlib.crc32("\0".join(self.names).encode())])
        return [
            Direction(
                JOINT, (rng.integers(0, 2, size=step.size, dtype=np.int8) * 2 - 1).astype(np.int8), step
            )
            for _ in range(count)
        ]

    def halves(self) -> tuple[Group, Group]:
        """The group cut in two, in order, the halves as equal in tensors as can be."""
        middle = (len(self.names) + 1) // 2
        return Group(self.names[:middle], self.shapes[:middle]), Group(
            self.names[middle:], self.shapes[middle:]
        )
