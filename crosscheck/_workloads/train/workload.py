"""A ``crosscheck.Train`` as the engine runs it: its two sides as backends with an ``update`` method
(``torch``, the reference, and ``jax``), its point (the port's), and the ``update`` judge."""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from types import ModuleType
from typing import Any

from crosscheck._backends import ORACLE
from crosscheck._backends.protocol import BackendSpec
from crosscheck._errors import user_call
from crosscheck._workloads.port.judge.running import statistics as running_of
from crosscheck._workloads.port.judge.workload import PortWorkload
from crosscheck._workloads.protocol import POINT_KNOBS, Judge, Knob, Options, OwnArrays, Point, Quantity
from crosscheck._workloads.train import running
from crosscheck._workloads.train.declare import Train, check_steps

SIDES = ("torch", "jax")

#: What the reference record says when the run's reference is the oracle (the default).
NO_ORACLE = (
    "an optimizer's update has no finite-difference oracle: the reference is the original's optimizer "
    "(PyTorch)"
)


def _steps(side: str) -> ModuleType:
    """Side ``side``'s training steps, imported when it trains (each imports its framework alone)."""
    if side == "torch":
        from crosscheck._workloads.train import torch_steps

        return torch_steps
    from crosscheck._workloads.train import jax_steps

    return jax_steps


class Trainer:
    """One side of a train as a backend: ``update(params, inputs, *, steps, hyper, zero)`` -> each
    parameter's trajectory ``(steps + 1, *shape)`` in PyTorch's names; ``zero``: the parameters
    trained on an exact zero gradient (their computed one is rounding noise: ``zeros``)."""

    def __init__(self, name: str, train: Train, notes: Mapping[str, str] | None = None) -> None:
        self.name, self.train, self.notes = name, train, dict(notes or {})

    def update(
        self, params: dict, inputs: dict, *, steps: int, hyper: Mapping[str, Any], zero: Sequence[str] = ()
    ) -> dict[str, Any]:
        module = _steps(self.name)
        factory = self.train.torch_optimizer if self.name == "torch" else self.train.optax
        step = self.train.torch_step if self.name == "torch" else self.train.jax_step
        if step is not None:  # a user's step function, made an optimizer of that side
            factory = functools.partial(module.stepper, step)
        prepared = self.train.port.prepared
        return module.trajectory(prepared, factory, hyper, params, inputs, steps, zero=tuple(zero))

    def info(self) -> dict[str, str]:
        optimizer = "the torch_optimizer factory" if self.name == "torch" else "the optax factory"
        return {"framework": self.name, "version": "", "device": "cpu", "optimizer": optimizer}


class TrainWorkload(OwnArrays):
    """The engine's view of a ``crosscheck.Train`` (it takes ``steps``; its quantity is ``update``)."""

    takes = frozenset({"steps"})
    case_knobs: tuple[Knob, ...] = (
        Knob("steps", "optimizer steps per side", int, 10),
        *POINT_KNOBS,
    )
    quantities: tuple[str, ...] = ("update",)
    #: Its import string, by which a worker process loads it again (None: given as an object).
    spec: str | None = None

    def __init__(self, train: Train, *, spec: str | None = None, steps: int | None = None) -> None:
        self.train, self.name, self.spec = train, train.name, spec
        self.steps = train.steps if steps is None else check_steps(steps)
        self.port = PortWorkload(train.port)
        if train.jax_step is not None:  # its params' tree checked once, traced: one line, not JAX's
            _steps("jax").check_step(self.port.prepared, train.jax_step, train.hyper, f"train `{self.name}`")
        prepared = self.port.prepared
        statistics = running_of(prepared)
        refused = running.refusal(self.name, prepared.jax_side.kind, statistics)
        if refused:
            raise ValueError(refused)
        conversion = prepared.conversion
        if conversion is not None:
            shapes = {**prepared.parameters, **{k: prepared.values[k].shape for k in statistics}}
            others = {k: v for k, v in prepared.values.items() if k not in shapes}
            why = user_call(
                f"train `{self.name}`",
                "reading `convert` back through its transpose",
                conversion.invertible,
                shapes,
                others,
            )
            if why is not None:
                raise ValueError(
                    f"train `{self.name}`: the port's `convert` cannot be read back after training ({why}): "
                    f"trained leaves come back through the conversion's transpose, exact for a selection "
                    f"(stacking, splitting, reshaping, transposing), not for a scaled, summed or piecewise "
                    f"conversion."
                )

    def configure(self, **given: Any) -> TrainWorkload:
        unknown = [k for k in given if k != "steps"]
        if unknown:
            raise ValueError(f"`{unknown[0]}` does not apply to train `{self.name}` (it takes `steps`).")
        return TrainWorkload(self.train, spec=self.spec, steps=given.get("steps", self.steps))

    def defaults(self, reference: BackendSpec) -> list[BackendSpec]:
        return [side for side in SIDES if side != (reference if reference in SIDES else "torch")]

    def check_candidates(self, specs: Sequence[BackendSpec]) -> None:
        wrong = next((s for s in specs if s not in SIDES), None)
        if wrong is not None:
            raise ValueError(
                f"train `{self.name}` checks its sides `torch` and `jax`; found candidate {wrong!r}."
            )

    def resolve(self, spec: BackendSpec) -> Trainer:
        if spec == ORACLE:
            return Trainer("torch", self.train, {"reference": NO_ORACLE})
        if spec not in SIDES:
            raise ValueError(f"train `{self.name}` has sides `torch` and `jax`; found {spec!r}.")
        return Trainer(spec, self.train)

    def point(self, *, dtype: str, seed: int) -> Point:
        point = self.port.point(dtype=dtype, seed=seed)
        point.case.update(
            workload=self.name, steps=self.steps, hyper={k: repr(v) for k, v in self.train.hyper.items()}
        )
        return point

    def instead(self, quantity: str) -> tuple[str, str | None] | None:
        """What checks ``quantity`` where this train does not: its port's gradients, and the port's
        import string when the train's module holds it under a name (None: not found)."""
        said = {"grad": "the gradients", "output": "the module outputs"}.get(quantity)
        if said is None:
            return None
        return f"{said} of the port it trains", _spec_of(self.train.port, self.spec)

    def judge(self, quantity: Quantity, point: Point, options: Options) -> Judge:
        if quantity.name != "update":
            raise ValueError(
                f"train `{self.name}` has no quantity {quantity.name!r}; it checks 'update' (its port checks "
                f"'grad': crosscheck.check(train.port, quantity={quantity.name!r}))."
            )
        from crosscheck._workloads.train.judge import UpdateJudge

        return UpdateJudge(self, point, options)


def _spec_of(port: Any, spec: str | None) -> str | None:
    """``module:name`` of ``port`` in the module of the train's import string ``spec`` (None: no such
    name, or the train was not given by an import string)."""
    import sys

    module = sys.modules.get((spec or "").partition(":")[0]) if spec and ":" in spec else None
    name = next((k for k, v in vars(module).items() if v is port), None) if module is not None else None
    return f"{module.__name__}:{name}" if module is not None and name else None
