"""What the port's judges read of the engine's view of a port (``workload.PortWorkload``), as a
``Protocol``: the judge's phases are handed it, never the view's class (which imports the judges)."""

from __future__ import annotations

from typing import Protocol

from crosscheck._types import Loaded
from crosscheck._workloads.port.declare.build import Prepared
from crosscheck._workloads.port.declare.port import Port


class PortView(Protocol):
    """What the judges read of the engine's view of a port (``workload.PortWorkload``)."""

    port: Port
    prepared: Prepared
    #: The ids of the run's ``jax`` backends (the port) and ``torch`` backends (the original).
    ports: set[int]
    torches: set[int]
    #: Whether the run's candidates name the port: its module captures are then taken early.
    port_requested: bool

    def torch_backend(self) -> Loaded:
        """The port's PyTorch side as the engine runs it: where, and in what arithmetic, it computes."""
        ...
