"""The workload registry: built-in names (``stack`` is an entry like any other), import strings and
``Workload`` objects, all turned into the workload the engine runs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from crosscheck._backends import install_hint
from crosscheck._backends.strings import import_attribute
from crosscheck._errors import user_call
from crosscheck._workloads.model.declare import Workload
from crosscheck._workloads.port.blocks.declare import Blocks
from crosscheck._workloads.port.declare.port import Port
from crosscheck._workloads.protocol import Declared, EngineWorkload, Knob
from crosscheck._workloads.stack.workload import DEFAULT, Stack, from_spec
from crosscheck._workloads.train.declare import Train

#: What an import string may name (the stack is a built-in name, or an object given as such).
DECLARATIONS = (Workload, Port, Train, Blocks)

#: Built-in workloads: name -> a one-line description (each made when it is loaded: ``load_workload``).
WORKLOADS: dict[str, str] = {
    "stack": Stack.description,
    "ste-stack": "ReLU stack, activations rounded to 1/8 straight-through",
}


def available_workloads() -> dict[str, str]:
    """Built-in workloads: name -> one-line description (``stack`` is the default).

    Example:
        >>> sorted(crosscheck.available_workloads())
        ['stack', 'ste-stack']
    """
    return dict(WORKLOADS)


def case_knobs(name: str) -> dict[str, Knob]:
    """The knobs of built-in workload ``name``'s case by name, as data (the stack's ``layers``, ...,
    ``init`` with its choices): what the CLI's case options and the sweep's checks are made of."""
    return {knob.name: knob for knob in load_workload(name).case_knobs}


def ci_cases() -> list[dict[str, Any]]:
    """The built-in CI matrix, the stack's cases (``Stack.ci_cases``): the stack's own, which no
    ``EngineWorkload`` is asked for."""
    return Stack.ci_cases()


def load_workload(spec: Any) -> EngineWorkload:
    """The workload the engine runs for ``spec``: None or ``"stack"`` (the default ``Stack()``), a
    ``Stack``, a built-in name, a ``Workload`` or ``Port``, an import string ``module:attribute`` naming
    one, or a workload's ``spec`` (plain data, as a worker process receives it).

    Raises:
        ValueError: an unknown name, an import string that cannot be resolved, or an attribute that is
            not a Workload (a zero-argument function returning one is called).
    """
    if spec is None:
        return DEFAULT
    if isinstance(spec, DECLARATIONS):
        return engine(spec)
    if isinstance(spec, Declared):  # an engine's view (the stack, a view made already): itself
        return spec.engine()
    if isinstance(spec, Mapping) and spec.get("workload") == Stack.name:
        return from_spec(spec)
    if not isinstance(spec, str):
        raise TypeError(
            f"`workload` must be a Workload, a built-in name or an import string, found "
            f"{type(spec).__name__}."
        )
    if spec == Stack.name:
        return DEFAULT
    if spec in WORKLOADS:
        from crosscheck._workloads.ste_stack import STE_STACK

        return engine(STE_STACK, spec)
    if ":" in spec:
        return engine(_resolve(spec, spec), spec)
    raise ValueError(
        f"unknown workload `{spec}`: expected one of {', '.join(WORKLOADS)}, or an import string "
        f"`package.module:attribute` naming a crosscheck.Workload."
    )


def engine(declared: Workload | Port | Train | Blocks, spec: str | None = None) -> EngineWorkload:
    """The engine's view of a declaration (``spec``: the name or import string it was loaded by; a
    worker process loads it again by it). The views import their declarations, so this table, above
    both, is where a declaration meets the view that runs it; each view is imported when first used (a
    port's imports the frameworks' adapters).

    Raises:
        ValueError: a ``Blocks`` (checked block by block, not one workload), or a port whose framework
            is not installed (the message says what to install).
    """
    if isinstance(declared, Blocks):
        named = f"`{spec}`" if spec else f"`{declared.name}`"
        how = f"`crosscheck blocks --workload {spec}`" if spec else "`crosscheck.check_blocks(blocks)`"
        raise ValueError(f"{named} is a crosscheck.Blocks, checked block by block: run it with {how}.")
    if isinstance(declared, Train):
        from crosscheck._workloads.train.workload import TrainWorkload

        return TrainWorkload(declared, spec=spec)
    if isinstance(declared, Port):
        try:
            # Prepared (and a faulty declaration refused, every problem at once) before the judges and
            # the oracle they build on are imported: a refusal needs neither.
            declared.prepared  # noqa: B018 (prepared once, kept on the port)
            from crosscheck._workloads.port.judge.workload import PortWorkload

            return PortWorkload(declared, spec=spec)
        except ImportError as exc:  # a framework a port needs is not installed
            raise ValueError(f"port `{declared.name}`: {exc}; {install_hint('all,port')}") from exc
    from crosscheck._workloads.model.workload import GenericWorkload

    return GenericWorkload(declared, spec=spec)


def _resolve(target: str, spec: str) -> Workload | Port | Train | Blocks:
    value = import_attribute(target, spec=spec, kind="workload")
    if callable(value) and not isinstance(value, DECLARATIONS):
        # A factory's sys.exit is a broken workload (one line, exit 2), not the end of the run.
        value = user_call(f"workload `{spec}`", "its factory", value)
    if not isinstance(value, DECLARATIONS):
        raise ValueError(
            f"workload `{spec}` must be a crosscheck.Workload, Port or Train (or a function returning one), "
            f"found {type(value).__name__}."
        )
    return value
