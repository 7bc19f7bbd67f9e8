"""How the workload oracle differences a float64 function: entry by entry or along directions.

A ``Function`` is a float64 function of the parameters (``sources``: the workload's NumPy reference or
surrogate, or an implementation's own loss). ``difference`` runs the oracle on one (``oracle.estimate``
entry by entry, ``model_screen.directional`` along random directions), each batch of evaluations
through the engine's guarded call; ``differencing`` says how every function of a run is differenced
(a ``Differencing``).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from crosscheck._compare.dtypes import as_dtype
from crosscheck._workloads.model.oracle.batched import Batched
from crosscheck._workloads.model.oracle.budget import Clock
from crosscheck._workloads.model.oracle.directions import (
    EVALUATIONS_PER_DIRECTION,
    Direction,
    DirectionalEstimate,
    directional,
)
from crosscheck._workloads.model.oracle.entries import (
    EVALUATIONS_PER_ENTRY,
    Guard,
    OracleFailed,
    WorkloadEstimate,
    estimate,
)
from crosscheck._workloads.model.oracle.groups import JOINT, Group, drawn, joint
from crosscheck._workloads.model.oracle.line import Line, on_line
from crosscheck._workloads.model.oracle.line import directional as line_directional
from crosscheck._workloads.model.oracle.one_thread import one_thread
from crosscheck._workloads.model.oracle.precision import Precision
from crosscheck._workloads.protocol import Call, Point, Progress

_T = TypeVar("_T", bound=npt.ArrayLike)

#: ``auto`` differences entry by entry while that costs at most this many evaluations per function
#: (512 entries), or no more than screening would.
AUTO_EVALUATIONS = EVALUATIONS_PER_ENTRY * 512


@dataclasses.dataclass(frozen=True)
class Function:
    """A float64 function of the parameters: ``fn(params) -> float``, ``label`` says which,
    ``owner`` the implementation it belongs to (None: the workload's own), ``value`` at the point,
    ``rounding`` an estimate of that value's rounding (0 when not measured) and ``precision`` what the
    noise probe found (``precision.probe``: None when not probed)."""

    label: str
    owner: str | None
    fn: Callable[[dict[str, np.ndarray]], Any]
    value: float
    rounding: float = 0.0
    precision: Precision | None = None
    #: Drops what the owner's adapter holds of its last evaluations (``releaser``; None: nothing to drop).
    release: Callable[[], Any] | None = dataclasses.field(default=None, compare=False, repr=False)
    #: The owner's adapter forms the points along a line itself (``oracle.line``; None: handed whole).
    line: Line | None = dataclasses.field(default=None, compare=False, repr=False)


@dataclasses.dataclass(frozen=True)
class Losses:
    """What the oracle needs of a workload's own NumPy losses, and no more: its ``name`` (for the
    messages), its float64 ``reference(params, inputs)`` and its ``surrogate(params, inputs)`` (each
    None when it has none). The judge makes it from a ``crosscheck.Workload``, which the oracle never
    imports."""

    name: str
    reference: Callable[[dict[str, np.ndarray], dict[str, np.ndarray]], Any] | None
    surrogate: Callable[[dict[str, np.ndarray], dict[str, np.ndarray]], Any] | None = None


@dataclasses.dataclass(frozen=True)
class Skip:
    """Why an implementation's own loss is not differenced; ``failure`` when that fails the run."""

    reason: str
    failure: bool = False


@dataclasses.dataclass(frozen=True)
class Differencing:
    """How every function of the run is differenced: ``mode`` full or screen, and why; ``clock`` the
    oracle's seconds and evaluations, and its budget (``oracle.budget``)."""

    mode: str
    why: str
    directions: list[Direction]
    per_parameter: int
    clock: Clock = dataclasses.field(default_factory=Clock)
    #: Each group's directions, drawn once for the run (``drawn``): every function is differenced along
    #: the same ones (one seed), so its functions share the arrays rather than each draw its own; and
    #: the noise probe's signs (``precision.probed``), shared by every side's probe.
    drawn: dict = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class Differences:
    """The oracle's answer for one function: entry by entry (``entries``) or along ``directions``;
    ``localized`` holds entry-by-entry answers for tensors a direction sent there (screen mode)."""

    function: Function
    entries: WorkloadEstimate | None = None
    directions: DirectionalEstimate | None = None
    localized: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = dataclasses.field(
        default_factory=dict
    )
    evaluations: int = 0
    seconds: float = 0.0
    #: Screen mode: each group of tensors screened so far, its directions and the oracle's answer.
    groups: dict[Group, tuple[list[Direction], DirectionalEstimate]] = dataclasses.field(default_factory=dict)
    #: The run's clock (``oracle.budget``): later groups and entries keep to its budget.
    clock: Clock = dataclasses.field(default_factory=Clock)
    #: The run's directions of each group (``Differencing.drawn``), shared by its functions.
    drawn: dict = dataclasses.field(default_factory=dict)


def differencing(
    mode: str,
    params: dict[str, np.ndarray],
    per_parameter: int,
    budget: float | None = None,
    *,
    started: float | None = None,
) -> Differencing:
    """``mode`` as asked (``auto`` picks by the number of loss evaluations each would cost); ``budget``
    the seconds the oracle keeps to (None: the default budget, ``budget.DEFAULT_SECONDS``), counted from
    ``started``, when the check started (``Clock.started``; None: the oracle's own seconds only)."""
    entries = sum(int(v.size) for v in params.values())
    full = EVALUATIONS_PER_ENTRY * entries
    screen = EVALUATIONS_PER_DIRECTION * per_parameter  # one group of every tensor, if it agrees
    if mode == "auto":
        mode = "full" if full <= max(AUTO_EVALUATIONS, screen) else "screen"
        why = f"auto: {entries} entries, ~{full} evaluations entry by entry vs ~{screen} along directions"
    else:
        why = f"--oracle-mode {mode}"
    if mode not in ("full", "screen"):  # "outputs" differences the stack's layers' outputs
        raise ValueError(f"a workload's `oracle_mode` is one of auto, full, screen; found {mode!r}.")
    return Differencing(mode, why, [], per_parameter, Clock.given(budget, started))


def batch_guard(call: Call) -> Guard:
    """Each batch of evaluations through the engine's guarded call; a failure raises ``OracleFailed``."""

    def guard(thunk: Callable[[], _T]) -> _T:
        out = call(thunk)
        if out.error:
            raise OracleFailed(out.error)
        return out.value

    return guard


def difference(
    function: Function, point: Point, chosen: Differencing, call: Call, progress: Progress | None
) -> Differences | str:
    """The oracle on ``function`` at the point (``chosen.mode``), or why it failed."""
    params = point.params  # cast to float64 where needed, not here (``_group``)
    label = f"oracle: {function.label}{chosen.clock.within()}"
    tick = None if progress is None else (lambda done, total: progress(label, done, total))
    start = time.perf_counter()
    guard = chosen.clock.guard(batch_guard(call), function.label)
    entries = sum(int(v.size) for v in params.values())
    planned = (
        EVALUATIONS_PER_ENTRY * entries
        if chosen.mode == "full"
        else EVALUATIONS_PER_DIRECTION * chosen.per_parameter
    )
    chosen.clock.plan(function.label, planned)
    try:
        with one_thread(entries):
            found = _difference(function, params, chosen, guard, tick)
    except OracleFailed as exc:
        return str(exc)
    finally:
        release(function.release)
    found.seconds = time.perf_counter() - start
    return found


def _difference(function: Function, params: dict, chosen: Differencing, guard: Any, tick: Any) -> Differences:
    """The oracle's differences of ``function`` at the point's ``params``: entry by entry (``estimate``
    works on its own float64 copy), or along the differencing's directions."""
    if chosen.mode == "full":
        est = estimate(function.fn, params, guard=guard, progress=tick, **_noise(function))
        return Differences(function, entries=est, evaluations=est.evaluations, clock=chosen.clock)
    found = Differences(function, clock=chosen.clock, drawn=chosen.drawn)
    every = Group.of(list(params), {k: v.shape for k, v in params.items()})
    _, along = _group(found, every, params, chosen.per_parameter, guard, tick)
    found.directions = along
    return found


def _group(diffs: Differences, group: Group, source: dict, count: int, guard: Any, tick: Any):
    """The oracle along ``count`` directions of ``group`` (cached on ``diffs``) at the point's own
    parameters ``source`` (what the directions drawn are keyed by): along the adapter's line, the point
    is cast to float64 where it is handed (``Line.hold``), else here (a float64 copy of the
    model a side fewer)."""
    line = diffs.function.line
    if group not in diffs.groups and line is not None and on_line(diffs.function.fn, group.sizes, count):
        dirs = drawn(diffs.drawn, group, source, count, source)  # the points formed on the adapter's side
        along = line_directional(
            line,
            source,
            group.pieces,
            dirs,
            guard=guard,
            progress=tick,
            **_noise(diffs.function),
        )
        diffs.groups[group] = (dirs, along)
        diffs.evaluations += along.evaluations
    if group not in diffs.groups:
        params = as_dtype(source, "float64")
        dirs = drawn(diffs.drawn, group, params, count, source)
        own = diffs.function.fn
        fn = joint(own, group, params) if isinstance(own, Batched) else group.function(own, params)
        along = directional(
            fn, {JOINT: group.flat(params)}, dirs, guard=guard, progress=tick, **_noise(diffs.function)
        )
        diffs.groups[group] = (dirs, along)
        diffs.evaluations += along.evaluations
    return diffs.groups[group]


def screen_group(
    diffs: Differences, group: Group, point: Point, count: int, call: Call, progress: Any
) -> tuple[list[Direction], DirectionalEstimate] | str:
    """The oracle along ``count`` directions of ``group`` (screen mode, cached), or why it failed."""
    if group in diffs.groups:
        return diffs.groups[group]
    params = point.params
    label = f"oracle: {diffs.function.label}, {len(group.names)} tensor(s)"
    tick = None if progress is None else (lambda done, total: progress(label, done, total))
    start = time.perf_counter()
    diffs.clock.plan(diffs.function.label, EVALUATIONS_PER_DIRECTION * count)
    guard = diffs.clock.guard(batch_guard(call), diffs.function.label)
    try:
        with one_thread(sum(int(v.size) for v in params.values())):
            found = _group(diffs, group, params, count, guard, tick)
    except OracleFailed as exc:
        return str(exc)
    finally:
        release(diffs.function.release)
    diffs.seconds += time.perf_counter() - start
    return found


def _noise(function: Function) -> dict[str, Any]:
    """The oracle's keywords for ``function``'s noise: its rounding, and whether it is float32's."""
    float32 = function.precision is not None and function.precision.float32
    return {"noise": function.rounding, "float32": float32}


def localize(diffs: Differences, names: list[str], point: Point, call: Call, progress: Any) -> str | None:
    """Entry-by-entry answers for ``names`` (screen mode), cached on ``diffs``; why not, if it failed."""
    missing = [k for k in names if k not in diffs.localized]
    if not missing:
        return None
    params = point.params  # ``estimate`` works on its own float64 copy
    label = f"oracle: {diffs.function.label}, entry by entry"
    tick = None if progress is None else (lambda done, total: progress(label, done, total))
    scale = diffs.directions.scale if diffs.directions is not None else None
    start = time.perf_counter()
    diffs.clock.plan(diffs.function.label, EVALUATIONS_PER_ENTRY * sum(int(params[k].size) for k in missing))
    try:
        est = estimate(
            diffs.function.fn,
            params,
            names=missing,
            guard=diffs.clock.guard(batch_guard(call), diffs.function.label),
            progress=tick,
            scale=scale,
            **_noise(diffs.function),
        )
    except OracleFailed as exc:
        return str(exc)
    finally:
        release(diffs.function.release)
    diffs.evaluations += est.evaluations
    diffs.seconds += time.perf_counter() - start
    for k in missing:
        diffs.localized[k] = (est.value[k], est.error[k], est.unjudgeable[k], est.reason[k])
    return None


def release(let_go: Callable[[], Any] | None) -> None:
    """``let_go()`` where there is one. What it returns is not read: the arrays are only memory (a
    release that failed leaves them held), and an adapter compares their bits before reusing any."""
    if let_go is not None:
        let_go()
