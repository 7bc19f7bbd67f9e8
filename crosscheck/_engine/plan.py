"""A plan: everything one run needs, decided before any backend runs."""

from __future__ import annotations

import dataclasses
from typing import Any

from crosscheck._engine.quantity import Quantity
from crosscheck._workloads.protocol import EngineWorkload, Judge, Options, Point


@dataclasses.dataclass(frozen=True)
class Plan:
    """The workload and its point, the quantity and its judge there, the candidates (``explicit``:
    named by the user, so an unavailable one fails the run), the reference, how many calls each
    candidate gets, and the options; ``isolate`` (True: each backend named by a spec in its own worker
    process, which rebuilds the workload from ``workload_spec``; ``"auto"``: only import strings and
    plugins) and ``timeout`` (seconds per call); ``memory``: the bytes the case needs, by part (the one
    estimate, made before anything was allocated)."""

    workload: EngineWorkload
    quantity: Quantity
    point: Point
    judge: Judge
    candidates: list[Any]
    reference: Any
    explicit: bool
    options: Options
    repeat: int = 2
    isolate: bool | str = False
    timeout: float | None = None
    workload_spec: Any = None
    memory: dict[str, int] = dataclasses.field(default_factory=dict)
