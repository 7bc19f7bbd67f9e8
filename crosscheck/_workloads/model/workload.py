"""A user's ``Workload`` as the engine runs it: its backends, its point, and its judge
(``generic_judge``: the oracle of float64 losses, entry by entry or along directions, against each
candidate's gradient with its rounding *measured* by a re-run in the other precision)."""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Sequence
from typing import Any

from crosscheck._backends import (
    DECLARED,
    ORACLE,
    framework_named,
    import_adapter,
    install_hint,
    load_backend,
    plugin_entry_points,
)
from crosscheck._workloads.model.declare import Workload
from crosscheck._workloads.model.judge import GenericJudge
from crosscheck._workloads.model.reference import WorkloadOracle
from crosscheck._workloads.protocol import Judge, Options, OwnArrays, Point

#: float64 copies of a workload's arrays alive at once, besides two per candidate (see
#: ``GenericWorkload.memory``), measured as the most a check allocates, in float64 copies of its arrays,
#: traced NumPy with NumPy backends (``tests/workloads/model/test_memory.py``): 6.2 with a backend as the
#: reference and one candidate, 6.9 with the oracle and two; 5 and 2 per candidate (7 and 9) cover them
#: within 1.5 times. How the figure came down: ``docs/measurements/memory.md``, "Copies a workload's
#: check holds".
MEMORY_ARRAYS = 5
#: float64 copies of the arrays per candidate (its gradients, its re-run, its measured rounding).
MEMORY_PER_CANDIDATE = 2
#: float64 copies of the arrays a framework's side holds on its own device (a card where it is placed
#: on one): the case's arrays handed to it and their gradients, at float64's width (its re-run's). Its
#: activations and its module's own weights (on the card already: not in the card's free memory) are
#: not counted: a card's check refuses only a case that cannot fit.
SIDE_COPIES = 2


class GenericWorkload(OwnArrays):
    """The engine's view of a ``crosscheck.Workload`` (``spec``: the name or import string it was loaded
    by, so that a worker process can load it again)."""

    def __init__(self, workload: Workload, *, spec: str | None = None) -> None:
        self.workload, self.name, self.spec = workload, workload.name, spec
        #: The implementations whose adapters this check renewed (``renewed``).
        self.renewed: set[str] = set()

    def defaults(self, reference: Any) -> list[Any]:
        specs = [name for name in self.workload.implementations if name != reference]
        if not specs:
            raise ValueError(
                f"workload `{self.name}` has no implementations to check; give it some "
                f"(`implementations={{'jax': ..., 'torch': ...}}`) or pass `backends`."
            )
        return specs

    def check_candidates(self, specs: Sequence[Any]) -> None:
        if ORACLE in specs:
            raise ValueError(
                f"`{ORACLE}` is the workload oracle: it can be the reference only, not a candidate backend."
            )

    def resolve(self, spec: Any) -> Any:
        """The oracle, an implementation of the workload, or a user's backend."""
        if spec == ORACLE:
            return WorkloadOracle()
        implementations = self.workload.implementations
        if isinstance(spec, str) and spec in implementations:
            adapter = kept_adapter(self.workload, spec)
            if spec not in self.renewed:  # once a check: its compiled functions traced afresh
                self.renewed.add(spec)
                renew = getattr(adapter, "renew", None)
                if callable(renew):
                    renew()
            return adapter
        # A plain name that is no plugin's is an implementation this workload lacks: the stack's own
        # backends (`jax-plain`, ...) would get a params dict where they expect arrays, and fail oddly.
        if isinstance(spec, str) and ":" not in spec and spec not in plugin_entry_points():
            raise ValueError(
                f"workload `{self.name}` has no `{spec}` implementation; it has: "
                f"{', '.join(implementations) or 'none'}."
            )
        return load_backend(spec)

    def memory(
        self, *, dtype: str, quantity: str, options: Options, candidates: Sequence[Any]
    ) -> dict[str, int]:
        """Bytes a case needs, by part: ``MEMORY_ARRAYS`` float64 copies of every parameter and input, and
        ``MEMORY_PER_CANDIDATE`` more per candidate (the arrays, each side's gradients and re-run, the
        oracle's, the tolerance's terms): what a check was measured to add at its peak, rounded up."""
        sizes = [*self.workload.parameters.values(), *self.workload.inputs.values()]
        entries = sum(math.prod(shape) for shape in sizes)
        return {"arrays": 8 * entries * (MEMORY_ARRAYS + MEMORY_PER_CANDIDATE * len(candidates))}

    def shares(self, sides: Sequence[Any]) -> dict[str, int]:
        """Bytes each framework's side holds on its own device, by framework (``{"torch": ..., "jax":
        ...}``), at least: ``SIDE_COPIES`` float64 copies of every parameter and input for each
        framework among ``sides`` (the run's candidates and reference) that are implementations of the
        workload (``plan.check_cards`` adds those sharing one card)."""
        sizes = [*self.workload.parameters.values(), *self.workload.inputs.values()]
        each = 8 * SIDE_COPIES * sum(math.prod(shape) for shape in sizes)
        own = [s for s in sides if isinstance(s, str) and s in self.workload.implementations]
        named = (framework_named(name.split("-", 1)[0]) for name in own)
        return {framework.name: each for framework in named if framework is not None}

    def point(self, *, dtype: str, seed: int) -> Point:
        params, inputs = self.workload.make(seed=seed, dtype=dtype)
        case = {
            "workload": self.name,
            "dtype": dtype,
            "seed": int(seed),
            "parameters": {k: list(v) for k, v in self.workload.parameters.items()},
            "inputs": {k: list(v) for k, v in self.workload.inputs.items()},
        }
        return Point(params, inputs, case, dtype)

    def judge(self, quantity: Any, point: Point, options: Options) -> Judge:
        if quantity.name != "grad":
            raise ValueError(f"workload `{self.name}` has no quantity {quantity.name!r}; it checks 'grad'.")
        return GenericJudge(self.workload, point, options)


def kept_adapter(workload: Workload, name: str) -> Any:
    """The adapter of ``workload``'s implementation ``name``, kept on the workload while it lives: JAX
    then compiles its gradient once however often it is checked, and the adapter, its compiled functions
    and whatever its loss holds (a port's: the port, its weights, both sides' modules) go with it. Not
    in a process-wide cache keyed by the loss: a blockwise check makes a port a block, and each block's
    would stay referenced to the end of the process. A loss defined at a module's top level holds
    nothing of one workload: its adapter is shared by every workload of it (``_shared_adapter``), so
    workloads made afresh from the same functions (``ste_stack(...)``) compile nothing again.

    What is kept is compiled programs, never traces: each check renews the adapter (``renew``, by
    ``GenericWorkload.resolve``), which traces the loss afresh, as its code is now (a global its
    helper reads, a closure's variable), and runs a kept program only where it is the same program
    (``crosscheck._workloads.programs``)."""
    loss = workload.implementations[name]
    if _module_level(loss):
        return _shared_adapter(name, loss)
    kept: dict[str, Any] = workload.__dict__.setdefault("_adapters", {})
    if name not in kept:
        kept[name] = _framework_backend(name, loss)
    return kept[name]


def _module_level(loss: Any) -> bool:
    """Whether ``loss`` is a function defined at a module's top level (no closure, not made inside
    another function): all it holds is that module's, which lives as long as the process anyway."""
    return inspect.isfunction(loss) and loss.__closure__ is None and "<locals>" not in loss.__qualname__


@functools.lru_cache(maxsize=64)
def _shared_adapter(name: str, loss: Any) -> Any:
    return _framework_backend(name, loss)


def _framework_backend(name: str, loss: Any) -> Any:
    """A new adapter of an implementation (``kept_adapter`` keeps one per workload)."""
    framework = framework_named(name.split("-", 1)[0])
    if framework is None:
        names = [f.name for f in DECLARED]
        raise ValueError(
            f"implementation `{name}`: crosscheck differentiates implementations named "
            f"{', '.join(names)} or starting with {'/'.join(f'`{n}-`' for n in names)}; for another "
            f"framework pass a backend object with `grad(params, inputs) -> dict` (e.g. an import string)."
        )
    module = import_adapter(f"{framework.name}.workload", name, install_hint(framework.extra))
    return getattr(module, framework.workload)(name, loss)
