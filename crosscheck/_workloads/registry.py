"""The workload registry: built-in names (``stack`` is an entry like any other), import strings and
``Workload`` objects, all turned into the workload the engine runs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from crosscheck._backends.strings import import_attribute
from crosscheck._errors import user_call
from crosscheck._workloads.model.declare import Workload
from crosscheck._workloads.port.blocks import Blocks
from crosscheck._workloads.port.declare import Port
from crosscheck._workloads.protocol import Declared, Knob
from crosscheck._workloads.stack.workload import DEFAULT, Stack, from_spec
from crosscheck._workloads.train.declare import Train

#: What an import string may name (the stack is a built-in name, or an object given as such).
DECLARATIONS = (Workload, Port, Train, Blocks)

#: Built-in workloads: name -> (import string ``module:attribute`` of the Workload, or None for the
#: stack; a one-line description). Imported only when used.
WORKLOADS: dict[str, tuple[str | None, str]] = {
    "stack": (None, Stack.description),
    "ste-stack": (
        "crosscheck._workloads.ste:STE_STACK",
        "ReLU stack, activations rounded to 1/8 straight-through",
    ),
}


def available_workloads() -> dict[str, str]:
    """Built-in workloads: name -> one-line description (``stack`` is the default).

    Example:
        >>> sorted(crosscheck.available_workloads())
        ['stack', 'ste-stack']
    """
    return {name: description for name, (_, description) in WORKLOADS.items()}


def case_knobs(name: str) -> dict[str, Knob]:
    """The knobs of built-in workload ``name``'s case by name, as data (the stack's ``layers``, ...,
    ``init`` with its choices): what the CLI's case options and the sweep's checks are made of."""
    return {knob.name: knob for knob in load_workload(name).case_knobs}


def load_workload(spec: Any) -> Any:
    """The workload the engine runs for ``spec``: None or ``"stack"`` (the default ``Stack()``), a
    ``Stack``, a built-in name, a ``Workload`` or ``Port``, an import string ``module:attribute`` naming
    one, or a workload's ``spec`` (plain data, as a worker process receives it).

    Raises:
        ValueError: an unknown name, an import string that cannot be resolved, or an attribute that is
            not a Workload (a zero-argument function returning one is called).
    """
    if spec is None:
        return DEFAULT
    if isinstance(spec, Declared):  # each says how it runs: a declaration's engine view, or itself
        return spec.engine()
    if isinstance(spec, Mapping) and spec.get("workload") == Stack.name:
        return from_spec(spec)
    if not isinstance(spec, str):
        raise TypeError(
            f"`workload` must be a Workload, a built-in name or an import string, found "
            f"{type(spec).__name__}."
        )
    if spec in WORKLOADS:
        target = WORKLOADS[spec][0]
        if target is None:
            return DEFAULT
        return _resolve(target, spec).engine(spec)
    if ":" in spec:
        return _resolve(spec, spec).engine(spec)
    raise ValueError(
        f"unknown workload `{spec}`: expected one of {', '.join(WORKLOADS)}, or an import string "
        f"`package.module:attribute` naming a crosscheck.Workload."
    )


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
