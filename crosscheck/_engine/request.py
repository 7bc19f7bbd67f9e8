"""A request: everything one check needs, from whichever front door made it.

``crosscheck.check``, ``crosscheck.run``, the CLI's ``run`` and ``explain``, a sweep's case and the
pytest helper each build one ``Request`` and hand it to ``execute`` (``_engine/execute.py``).
The option rules live here, once: the API and the CLI refuse the same things with the same words, each
option spelled as its front door spells it (``layers`` for the API, ``--layers`` for the CLI).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from crosscheck._backends import ORACLE
from crosscheck._backends.protocol import BackendSpec
from crosscheck._engine.quantity import QUANTITIES, default_reference
from crosscheck._records import Execution, Oracle, Slack, spell
from crosscheck._workloads.protocol import EngineWorkload, Progress

#: The front doors, for the spelling of an option in a message: a keyword, or a command-line option.
FRONTS = ("api", "cli")
#: The case's dtype and seed when the request leaves them out (None: not given).
DTYPE, SEED = "float32", 0


@dataclasses.dataclass(frozen=True)
class Request:
    """One check: the workload, the workload's options that configure it, and the records of
    ``crosscheck.check``.

    Attributes:
        workload: a workload object, a built-in name or an import string (None: the stack).
        workload_options: what the user gave of ``run``'s knobs (``layers``, ``batch``, ``dim``,
            ``init``, ``scale``, ``weights`` with ``x``, ``explain``, ``steps``): set on the workload
            (its ``configure``), each one it takes, and the quantity one it has a judge for (``run``,
            the CLI). None: the workload as it is, whose judge refuses a quantity it does not have in
            its own words (``check``). Not the judge's ``Options`` (how a run judges: the plan makes
            those of the records below).
        dtype: the case's dtype (None: not given, ``float32``); ``seed`` likewise (0).
        front: who asked (``"api"`` or ``"cli"``): how a refused option is spelled.
        announce: called with the plan's ``Outlook`` (memory, the oracle's cost) before a run starts;
            the CLI's notes on stderr (the engine prints nothing).
        plot: keep each comparison's per-entry arrays (``Comparison.arrays``), which a plot draws (the
            CLI's ``--plot``); without it no comparison keeps an array per entry.
        programs: record each candidate's traced program wherever it ran (``Plan.programs``): set by a
            classification's re-runs (``classify``), whose host CPU run's program is compared with the
            device run's.
    """

    workload: Any = None
    workload_options: Mapping[str, Any] | None = None
    backends: Sequence[BackendSpec] | None = None
    #: None: the quantity's (``default_reference``: the oracle; PyTorch's forward for ``output``).
    reference: BackendSpec | None = None
    dtype: str | None = None
    seed: int | None = None
    quantity: str = "grad"
    slack: Slack | None = None
    strict: bool = False
    oracle: Oracle = Oracle()  # noqa: RUF009 (frozen: one instance serves every request)
    execution: Execution = Execution()  # noqa: RUF009
    progress: Progress | None = None
    front: str = "api"
    announce: Callable[[Any], None] | None = None
    plot: bool = False
    programs: bool = False

    @property
    def case(self) -> dict[str, Any]:
        """The case's ``dtype`` and ``seed``, their defaults where not given."""
        return {"dtype": self.dtype or DTYPE, "seed": SEED if self.seed is None else self.seed}

    def to_data(self) -> dict[str, Any]:
        """The request as plain data (arrays allowed) for a worker process: its callables left out
        (``announce`` said as whether there is one)."""
        slack, oracle, execution = self.slack, self.oracle, self.execution
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        data.update(
            workload_options=None if self.workload_options is None else dict(self.workload_options),
            backends=None if self.backends is None else list(self.backends),
            slack=None if slack is None else [slack.rtol, slack.atol],
            oracle=[oracle.mode, oracle.directions, oracle.budget],
            execution=dataclasses.asdict(execution),
            progress=None,
            announce=self.announce is not None,
        )
        return data

    @classmethod
    def from_data(cls, data: dict[str, Any], **callables: Any) -> Request:
        """The request ``to_data`` made, with its callables (``progress``, ``announce``) given again."""
        data = dict(data)
        slack = data.pop("slack")
        data.update(
            slack=None if slack is None else Slack(*slack),
            oracle=Oracle(*data.pop("oracle")),
            execution=Execution(**data.pop("execution")),
            **callables,
        )
        return cls(**data)


def with_reference(request: Request) -> Request:
    """``request`` with its reference decided: the one given, else its quantity's."""
    if request.reference is not None:
        return request
    return dataclasses.replace(request, reference=default_reference(request.quantity))


def check_request(request: Request) -> None:
    """The rules that need no workload, before any code runs, in the CLI's order: the arrays' rules
    (``check_arrays``; the CLI checks them before it reads either file), ``directions`` with a full
    or outputs oracle (neither screens), then the reference of a forward check (``output``: PyTorch's
    forward).

    Raises:
        ValueError: the first rule broken.
    """
    front = request.front
    if front not in FRONTS:  # a programming error: every front door sets its own
        raise ValueError(f"`front` must be one of {', '.join(FRONTS)}, found {front!r:.40}.")
    given = request.workload_options or {}
    arrays = {k: v for k, v in given.items() if k in ("weights", "x")}
    if arrays:
        check_arrays(arrays, {**_case_given(request), **given}, front=front)
    if request.oracle.directions != Oracle().directions and request.oracle.mode in ("full", "outputs"):
        screen, never = (spell("oracle_mode", mode, front=front) for mode in ("screen", request.oracle.mode))
        raise ValueError(
            f"`{spell('directions', front=front)}` applies to screening (`{screen}` or `auto`); "
            f"`{never}` never screens."
        )
    check_output_reference(request.quantity, request.reference, front=front)


def check_output_reference(quantity: str, reference: Any, *, front: str) -> None:
    """The forward check (``output``) compares a port's module outputs with PyTorch's forward: its
    reference is ``torch`` (its default), never the oracle, which differentiates, nor another backend."""
    if quantity != "output" or reference is None or reference == "torch":
        return
    asked, given = spell("quantity", "output", front=front), spell("reference", reference, front=front)
    why = (
        "the oracle differentiates losses, and a forward check computes no gradient"
        if reference == ORACLE
        else f"`{reference}` is no PyTorch forward"
        if isinstance(reference, str)
        else "an object is none"
    )
    raise ValueError(
        f"`{given}` does not apply to `{asked}`: the forward check compares the port's module outputs with "
        f"PyTorch's forward, `{spell('reference', 'torch', front=front)}` (its default); {why}."
    )


def check_arrays(arrays: Mapping[str, Any], given: Mapping[str, Any], *, front: str) -> None:
    """Your own ``weights`` come with ``x``, and no option of the case with them (they determine it).

    Args:
        arrays: ``weights`` and ``x`` as given (an array, or the CLI's file name).
        given: every option of the case given, in order (``weights`` and ``x`` among them, skipped).

    Raises:
        ValueError: one of the two alone, or an option of the case beside them.
    """
    if len(arrays) == 1:
        raise ValueError(
            f"`{spell('weights', front=front)}` and `{spell('x', front=front)}` must be given together; "
            f"found only `{spell(next(iter(arrays)), front=front)}`."
        )
    shaped = [k for k in given if k not in ("weights", "x", "explain", "steps")]
    if shaped:
        raise ValueError(
            f"`{spell(shaped[0], front=front)}` cannot be combined with "
            f"`{spell('weights', front=front)}/{spell('x', front=front)}`: the arrays "
            "determine the case."
        )


def _instead(workload: Any, quantity: str, front: str) -> str:
    """Why ``workload`` does not check ``quantity``, and what does (a train's port checks the gradient)."""
    checks = ", ".join(f"`{spell('quantity', q, front=front)}`" for q in workload.quantities)
    asked = spell("quantity", quantity, front=front)
    return _elsewhere(
        workload,
        quantity,
        f"`{asked}` does not apply to workload `{workload.name}`: it checks {checks}",
        front,
    )


def _elsewhere(workload: Any, quantity: str, said: str, front: str) -> str:
    """``said``, and where what ``workload`` does not check is checked (a train's port), when it says."""
    instead = getattr(workload, "instead", None)
    found = instead(quantity) if callable(instead) else None
    if found is None:
        return said + "."
    what, spec = found
    where = (
        f"`{spell('workload', spec, front=front)}`"
        if spec
        else "the import string of its port as the workload"
    )
    return f"{said}; {what} are checked with {where} (`{spell('quantity', quantity, front=front)}`)."


def _not_owned(workload: Any, quantity: str, owners: str, front: str) -> str:
    """Why ``workload`` does not check ``quantity``, which only ``owners`` have (and, for a train, where
    its port's is checked)."""
    checks = ", ".join(f"`{spell('quantity', q, front=front)}`" for q in workload.quantities)
    asked = spell("quantity", quantity, front=front)
    said = f"`{asked}` is the check of {owners}; workload `{workload.name}` is not one: it checks {checks}"
    return _elsewhere(workload, quantity, said, front)


def _case_given(request: Request) -> dict[str, Any]:
    return {k: v for k, v in (("dtype", request.dtype), ("seed", request.seed)) if v is not None}


def configure(workload: EngineWorkload, request: Request) -> EngineWorkload:
    """``workload`` with the request's ``workload_options`` set, each one it takes, and the quantity one
    it has a judge for (None: ``workload`` as it is).

    Raises:
        ValueError: the first option it does not take (a ``Train``'s ``quantity='update'`` and ``steps``
            go together, with it only), or what its ``configure`` refuses.
    """
    front, quantity = request.front, request.quantity
    what = QUANTITIES.get(quantity)
    if what is not None and what.owners and quantity not in workload.quantities:
        raise ValueError(_not_owned(workload, quantity, what.owners, front))
    given = request.workload_options
    if given is None:  # ``check``'s: the workload as given
        return workload
    refused = [k for k in given if k not in workload.takes]
    if quantity in QUANTITIES and quantity not in workload.quantities:  # an unknown one is the plan's
        refused.append("quantity")
    if quantity != "update" and "update" in workload.quantities and getattr(workload, "instead", None):
        raise ValueError(_instead(workload, quantity, front))
    if "steps" in refused or (quantity == "update") != ("update" in workload.quantities):
        raise ValueError(
            f"`{spell('quantity', 'update', front=front)}` and `{spell('steps', front=front)}` go together "
            "with a crosscheck.Train workload (a port and an optimizer on each side); workload "
            f"`{workload.name}` checks {', '.join(workload.quantities)}."
        )
    if refused:
        raise ValueError(
            f"`{spell(refused[0], front=front)}` applies to the stack workload only; workload "
            f"`{workload.name}` defines its own arrays (it takes {spell('dtype', front=front)} and "
            f"{spell('seed', front=front)})."
        )
    return workload.configure(**given) if given else workload
