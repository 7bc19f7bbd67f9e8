"""A plan: everything one run needs, decided before any backend runs (``plan``), and what it says before
it starts (``Outlook``: the memory it needs, the oracle's cost)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from crosscheck._backends import ORACLE, Placement, framework_named
from crosscheck._backends.protocol import BackendSpec
from crosscheck._engine.quantity import Quantity
from crosscheck._engine.quantity import quantity as _quantity
from crosscheck._engine.request import Request
from crosscheck._files import available_memory, format_bytes
from crosscheck._records import Execution, Oracle, Slack
from crosscheck._workloads import protocol
from crosscheck._workloads.protocol import EngineWorkload, Judge, Options, Point, WorkloadSpec


@dataclasses.dataclass(frozen=True)
class Plan:
    """The workload and its point, the quantity and its judge there, the candidates (``explicit``:
    named by the user, so an unavailable one fails the run), the reference, how many calls each
    candidate gets, and the options; ``isolate`` (True: each backend named by a spec in its own worker
    process, which rebuilds the workload from ``workload_spec``; ``"auto"``: only import strings and
    plugins), ``timeout`` (seconds per call) and ``placement`` (each side's, ``Execution.placement``,
    in effect inside each call); ``memory``: the bytes the case needs, by part (the one
    estimate, made before anything was allocated)."""

    workload: EngineWorkload
    quantity: Quantity
    point: Point
    judge: Judge
    candidates: list[BackendSpec]
    reference: BackendSpec
    explicit: bool
    options: Options
    repeat: int = 2
    isolate: bool | str = False
    timeout: float | None = None
    workload_spec: WorkloadSpec = None
    placement: tuple[Placement, ...] = ()
    memory: dict[str, int] = dataclasses.field(default_factory=dict)
    #: Record each candidate's traced program (``program()``), wherever it ran: a classification's
    #: re-run asks, to compare it with the device run's (a candidate on a device records it anyway).
    programs: bool = False


@dataclasses.dataclass(frozen=True)
class Outlook:
    """What a plan can say before it runs, as plain data (a contained run's worker sends it): the bytes
    the case needs, by part, and the oracle's cost line when its estimate says the run will be long
    (None: short, not the oracle, or a judge that does not estimate)."""

    memory: dict[str, int]
    cost: str | None = None

    @classmethod
    def of(cls, planned: Plan) -> Outlook:
        """The outlook of ``planned`` (the oracle's estimate made here, only when asked for: it may time
        one evaluation)."""
        cost = getattr(planned.judge, "cost", None)
        if planned.reference != ORACLE or not callable(cost):
            return cls(dict(planned.memory))
        found = cost(len(planned.candidates))
        return cls(dict(planned.memory), found.line() if found.long else None)


def plan(workload: EngineWorkload, request: Request, *, started: float | None = None) -> Plan:
    """The plan of a loaded (and configured) workload for a checked ``request`` (its reference decided:
    ``with_reference``; its records checked where it was: ``check_records``): its memory estimated (and
    refused when too large) before anything is allocated, then its point, its judge, the candidates.
    The records travel in the judge's ``Options`` as they were made; ``request.plot`` keeps each
    comparison's per-entry arrays, for a plot; ``started``: when the check started (``protocol.now``; None:
    now), from which the model oracle's budget counts its wall time."""
    reference, backends, execution = request.reference, request.backends, request.execution
    assert reference is not None  # decided where the request was checked (``with_reference``)
    options = Options(
        slack=request.slack,
        oracle=request.oracle,
        strict=request.strict,
        seed=request.case["seed"],
        explain=workload.explain,
        progress=request.progress,
        plot=request.plot,
        started=protocol.now() if started is None else started,
    )
    specs = list(backends or ())
    shared = at_home(execution.placement, workload)
    prepare(shared)
    memory = check_memory(
        workload, dtype=request.case["dtype"], quantity=request.quantity, options=options, candidates=specs
    )
    chosen = list(backends) if backends is not None else None
    shares = getattr(workload, "shares", None)

    def per_side() -> dict[str, int]:  # asked only where a card is: the workload's own errors come first
        sides = chosen if chosen is not None else workload.defaults(reference)
        return shares([*sides, reference]) if callable(shares) else {}

    check_cards(memory, shared, per_side if callable(shares) else None)
    point = workload.point(**request.case)
    what = _quantity(request.quantity)
    judge = workload.judge(what, point, options)
    if request.oracle.budget is not None and not getattr(judge, "budgeted", False):
        raise ValueError(
            f"`budget` applies to the model oracle (a crosscheck.Workload or Port); workload "
            f"`{workload.name}` is judged without it."
        )
    candidates = chosen if chosen is not None else workload.defaults(reference)
    workload.check_candidates(candidates)
    return Plan(
        workload,
        what,
        point,
        judge,
        candidates,
        reference,
        backends is not None,
        options,
        execution.repeat,
        isolate=execution.isolate,
        timeout=execution.timeout,
        workload_spec=workload.spec,
        placement=execution.placement,
        memory=memory,
        programs=request.programs,
    )


def check_records(slack: Any, oracle: Any, execution: Any, backends: Any) -> None:
    """Each record of its kind, and ``backends`` a list (``TypeError`` naming the keyword)."""
    for name, value, kind in (
        ("slack", slack, Slack),
        ("oracle", oracle, Oracle),
        ("execution", execution, Execution),
    ):
        if not isinstance(value, kind) and not (name == "slack" and value is None):
            raise TypeError(f"`{name}` must be a crosscheck.{kind.__name__}, found {type(value).__name__}.")
    if backends is not None and (isinstance(backends, (str, bytes)) or not isinstance(backends, Sequence)):
        found = f"{type(backends).__name__} {backends!r:.60}"
        raise TypeError(f"`backends` must be a list of backends, found {found}.")


def check_memory(workload: EngineWorkload, **case: Any) -> dict[str, int]:
    """The bytes the case needs, by part (``workload.memory(**case)``, when it estimates), before
    anything is allocated.

    Raises:
        MemoryTooLarge: more than this machine has available (the message gives the estimate).
    """
    memory = getattr(workload, "memory", None)
    parts = memory(**case) if callable(memory) else {}
    total, available = sum(parts.values()), available_memory()
    if total > available:
        shown = ", ".join(f"{name} {format_bytes(n)}" for name, n in parts.items() if n)
        raise MemoryTooLarge(
            f"this case needs about {format_bytes(total)} of memory ({shown}), more than the "
            f"{format_bytes(available)} this machine has available; make it smaller."
        )
    return parts


def at_home(placement: Sequence[Placement], workload: Any) -> tuple[Placement, ...]:
    """The run's placement as the sides will share the machine: each record given the device its side's
    own code lives on (the workload's optional ``homes()``: a port's module already on ``cuda``) where
    the run chose none (its framework's state's ``at_home``), for what is set and checked before the
    check starts (``prepare``, ``check_cards``). The calls keep the run's own placement."""
    homes = getattr(workload, "homes", None)
    found = homes() if callable(homes) else {}
    out = []
    for record in placement:
        framework = framework_named(record.framework) if record.framework in found else None
        move = getattr(framework.module("state"), "at_home", None) if framework is not None else None
        out.append(move(record, found[record.framework]) if callable(move) else record)
    return tuple(out)


def start_environment(placement: Sequence[Placement]) -> dict[str, str]:
    """The variables a process that runs the check must start with, given every side's placement (each
    framework's state's optional ``environ``: XLA's flags, which JAX reads once): a contained check's
    worker is started with them, so that they are in effect before its framework first uses a device."""
    found: dict[str, str] = {}
    for record in placement:
        framework = framework_named(record.framework)
        environ = getattr(framework.module("state"), "environ", None) if framework is not None else None
        found.update(environ(placement) if callable(environ) and not record.left_alone else {})
    return found


def prepare(placement: Sequence[Placement]) -> list[str]:
    """What each framework sets before its side first uses a device, given every side's placement (its
    state's ``before``: JAX's allocator where both sides share one card, XLA's flags), in words; before
    anything is allocated, and in the process that runs the check (a contained check's worker)."""
    said: list[str] = []
    if all(record.left_alone for record in placement):
        return said
    for record in placement:
        framework = framework_named(record.framework)
        before = getattr(framework.module("state"), "before", None) if framework is not None else None
        words = before(placement) if callable(before) else ""
        said += [words] if words else []
    return said


def check_cards(
    parts: dict[str, int],
    placement: Sequence[Placement],
    shares: dict[str, int] | Callable[[], dict[str, int]] | None = None,
) -> None:
    """The case fits the free memory of each card a side is placed on by name (its state's
    ``device_memory``), before anything is allocated there: each side's share on its device (``shares``,
    by framework: the workload's estimate per device, or a function that works it out where a card is
    found), that card's side's and every other side's its state says computes there too (``on_card``:
    JAX's, unless on the host CPU); a workload that does not split its estimate (``shares`` None): the
    whole case's (``check_memory``'s ``parts``) on each.

    Raises:
        MemoryTooLarge: more than a card has free (the message gives the estimate, per side, and the card).
    """
    if shares is None and not sum(parts.values()):  # nothing estimated: no card is asked
        return
    for record in placement:
        framework = framework_named(record.framework)
        measure = getattr(framework.module("state"), "device_memory", None) if framework is not None else None
        found = measure(record) if callable(measure) else None
        if found is None or framework is None:
            continue
        if callable(shares):  # worked out once, where a card is found
            shares = shares()
        needed = _on_card(record, placement, shares) if shares is not None else dict(parts)
        total = sum(needed.values())
        if total > found[1]:
            shown = ", ".join(f"{name} {format_bytes(n)}" for name, n in needed.items() if n)
            host = ", ".join(f"`{k}` {v}" for k, v in record.on_host().chosen().items())
            raise MemoryTooLarge(
                f"this case needs about {format_bytes(total)} of memory ({shown}), more than the "
                f"{format_bytes(found[1])} free on {found[0]}, where the {framework.title} side is placed; "
                f"make it smaller, or place that side on the host ({host})."
            )


def _on_card(card: Placement, placement: Sequence[Placement], shares: dict[str, int]) -> dict[str, int]:
    """Each side's share on the card ``card``'s side is placed on, by the words that say it (``the
    PyTorch side's``): its own, and each other side's that computes there too (its state's ``on_card``)."""
    out = {}
    for record in (card, *(r for r in placement if r is not card)):  # the card's own side first
        framework = framework_named(record.framework)
        if framework is None or record.framework not in shares:
            continue
        there = getattr(framework.module("state"), "on_card", None)
        if record is card or (callable(there) and there(record)):
            out[f"the {framework.title} side's"] = shares[record.framework]
    return out


class MemoryTooLarge(ValueError):
    """A case that cannot fit in this machine's memory (refused before anything is allocated)."""
