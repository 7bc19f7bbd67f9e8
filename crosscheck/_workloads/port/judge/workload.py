"""A ``Port`` as the engine runs it: the generic workload of its ``Workload``, and its judges: the
gradient judge (``gradient.PortJudge``: the gradients, every module's output, the port's verdict) and
the forward check (``quantity="output"``, ``forward.OutputJudge``: the module outputs alone).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from crosscheck._backends.protocol import BackendSpec
from crosscheck._types import Loaded
from crosscheck._workloads.model.workload import GenericWorkload
from crosscheck._workloads.port.declare.build import Prepared, output_layouts
from crosscheck._workloads.port.declare.notes import case_notes
from crosscheck._workloads.port.declare.port import Port
from crosscheck._workloads.port.judge.forward import OutputJudge
from crosscheck._workloads.port.judge.gradient import PortJudge
from crosscheck._workloads.protocol import Judge, Options, OwnArrays, Point


class PortWorkload(OwnArrays):
    """The engine's view of a ``crosscheck.Port`` (the generic workload of its ``Workload``)."""

    def __init__(self, port: Port, *, spec: str | None = None) -> None:
        self.port, self.name, self.spec = port, port.name, spec
        self.prepared: Prepared = port.prepared
        self.inner = GenericWorkload(self.prepared.workload)  # raises on an unresolved mapping
        self.prepared.jax_side.renew()  # one check: its captures traced afresh (``JaxSide.renew``)
        self.ports: set[int] = set()
        self.torches: set[int] = set()  # the PyTorch side's backends (``own``: its proof)
        #: Whether the run's candidates name the port (``jax``): its module captures are then taken
        #: before the reference's gradients (``capture.Early``), while little is held.
        self.port_requested = False

    def defaults(self, reference: Any) -> list[Any]:
        return self.inner.defaults(reference)

    def check_candidates(self, specs: Sequence[Any]) -> None:
        self.inner.check_candidates(specs)
        self.port_requested = any(isinstance(s, str) and s == "jax" for s in specs)

    def resolve(self, spec: BackendSpec) -> Loaded:
        backend = self.inner.resolve(spec)
        if spec == "jax":
            self.ports.add(id(backend))
        if spec == "torch":
            self.torches.add(id(backend))
        return backend

    def jax_backend(self) -> Loaded:
        """The port's JAX side as the engine runs it, the same adapter each time (``kept_adapter``): where
        its captures run is asked of it (``capture.home``), before the candidate itself is resolved."""
        return self.inner.resolve("jax")

    def torch_backend(self) -> Loaded:
        """The port's PyTorch side as the engine runs it (the same adapter each time): where its module
        computes, and in what arithmetic, is asked of it (the judge's allowance for its device)."""
        return self.inner.resolve("torch")

    def homes(self) -> dict[str, str]:
        """Where the port's own code lives off the host, by framework (``{"torch": "cuda:0"}``: its
        PyTorch module on a card), read before the check starts: a module already on a card shares it
        with the JAX side and must fit there as one placed by name (``plan.at_home``)."""
        from crosscheck._workloads.port.sides.torch_device import device_of

        found = device_of(self.prepared.torch_side.m)
        return {} if found.type == "cpu" else {"torch": str(found)}

    def shares(self, sides: Sequence[Any]) -> dict[str, int]:
        """Bytes each side holds on its own device, by framework (``GenericWorkload.shares``)."""
        return self.inner.shares(sides)

    def point(self, *, dtype: str, seed: int) -> Point:
        point = self.inner.point(dtype=dtype, seed=seed)
        point.case.update(case_notes(self.prepared, dtype))
        return point

    quantities: tuple[str, ...] = ("grad", "output")

    def judge(self, quantity: Any, point: Point, options: Options) -> Judge:
        if quantity.name == "output":  # the forward check: module outputs only
            return OutputJudge(self, point, options)
        if quantity.name != "grad":
            checks = ", ".join(self.quantities)
            raise ValueError(f"port `{self.name}` has no quantity {quantity.name!r}; it checks {checks}.")
        if self.port.loss is None:  # the loss's layouts, found (or refused) before any backend runs
            output_layouts(self.prepared)
        return PortJudge(self, point, options)
