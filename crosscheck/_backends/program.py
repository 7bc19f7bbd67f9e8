"""What program a side ran, as its framework traced it: the seam that lets a run on the host CPU clear or
explain a run on a device only when both ran the same program.

A port may branch on where it runs (a Pallas kernel on a TPU, a fused attention on a GPU, ``if
jax.default_backend() == "tpu"``): its host CPU run then takes another path, and agreeing there says
nothing about the device's path. A backend that can say what it runs has an optional
``program(params, inputs)``: given the point's arrays as ``specs`` (each array's shape and dtype, no
values), it traces the computation its ``grad`` makes, where the run's placement puts it, and returns
plain data (sent from a worker process as it is): ``{"operations": {name: count}, "by_platform":
[name, ...]}``, each operation of the traced program counted (a framework's primitive, or its kernel or
custom call by name: ``pallas_call:flash``), and the operations that choose their code by the platform
they run on. A framework's folder makes it (``backends/jax/program.py``); the engine records it in the
backend's notes (``"program"``) and the classification compares it (``Program``), naming no framework.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np


def specs(arrays: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Each array's shape and dtype, by name, as plain data: what ``program`` is given (no values: a
    trace needs none, and nothing of the size of the model is copied or sent)."""
    return {
        k: {"shape": [int(d) for d in np.shape(v)], "dtype": np.asarray(v).dtype.name}
        for k, v in arrays.items()
    }


@dataclasses.dataclass(frozen=True)
class Program:
    """A traced program: each operation's count (``operations``), and the operations that choose their
    code by the platform they run on (``by_platform``: the same trace runs other code on the host)."""

    operations: Mapping[str, int]
    by_platform: tuple[str, ...] = ()

    @classmethod
    def of(cls, data: Any) -> Program | None:
        """The program ``program()`` returned (its plain data), or None for anything else."""
        if not isinstance(data, Mapping) or not isinstance(data.get("operations"), Mapping):
            return None
        operations = {str(k): int(v) for k, v in data["operations"].items()}
        return cls(operations, tuple(str(n) for n in data.get("by_platform", ())))

    def to_data(self) -> dict[str, Any]:
        return {"operations": dict(self.operations), "by_platform": list(self.by_platform)}

    def differences(self, other: Program, here: str, there: str) -> list[str]:
        """How ``other`` differs from this program, one phrase an operation (``here`` and ``there`` name
        where each ran): ``` `pallas_call:flash` (2 on the device, none on the host CPU) ```; the
        operations that choose their code by platform, where either has some. Empty: the same program."""
        found = [
            f"`{name}` ({_count(self.operations.get(name, 0))} {here}, "
            f"{_count(other.operations.get(name, 0))} {there})"
            for name in sorted(set(self.operations) | set(other.operations))
            if self.operations.get(name, 0) != other.operations.get(name, 0)
        ]
        chosen = sorted(set(self.by_platform) | set(other.by_platform))
        if chosen:
            found.append(f"{', '.join(f'`{n}`' for n in chosen)}, which choose their code by the platform")
        return found


def _count(n: int) -> str:
    return str(n) if n else "none"
