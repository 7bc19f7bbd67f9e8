"""What the workload oracle differences, and how: a float64 loss, entry by entry or along directions.

A ``Function`` is a float64 function of the parameters: the workload's NumPy ``reference`` (or its
``surrogate``), or an implementation's *own* loss, evaluated in float64 without autodiff (the adapter's
``loss(params, inputs)``: PyTorch under ``torch.no_grad()``, JAX compiled but never differentiated).
``difference`` runs the oracle on one (``oracle.estimate`` entry by entry, ``model_screen.directional``
along random directions), each batch of evaluations through the engine's guarded call.

An implementation's float64 loss is checked before it is differenced: it must come back as one float64
number, finite, and differ from the float32 evaluation (a module pinned to float32 computes the same
bits in both; its "float64" loss cannot be differenced). It is then probed for its noise
(``precision.probe``): a loss with float32 steps inside (Hugging Face's softmax and norms upcast "to
float32") has float32's, which becomes its rounding, and it is differenced with float32's step and
error bar (``entries.FLOAT32_MAXITER``, ``entries.FLOAT32_FRACTION``).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from crosscheck._compare.constants import WIDEN
from crosscheck._compare.dtypes import as_dtype
from crosscheck._errors import describe, reraise_user_interrupt
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
    OracleFailed,
    WorkloadEstimate,
    estimate,
    read_only,
)
from crosscheck._workloads.model.oracle.groups import JOINT, Group, drawn, joint
from crosscheck._workloads.model.oracle.line import Line, at_point, line_of, on_line
from crosscheck._workloads.model.oracle.line import directional as line_directional
from crosscheck._workloads.model.oracle.precision import Precision, probed
from crosscheck._workloads.model.oracle.threads import one_thread
from crosscheck._workloads.protocol import Call, Point, Progress

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
class Plan:
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
    #: The run's directions of each group (``Plan.drawn``), shared by its functions.
    drawn: dict = dataclasses.field(default_factory=dict)


def plan(mode: str, params: dict[str, np.ndarray], per_parameter: int, budget: float | None = None) -> Plan:
    """``mode`` as asked (``auto`` picks by the number of loss evaluations each would cost); ``budget``
    the oracle's seconds at most (None: no limit)."""
    entries = sum(int(v.size) for v in params.values())
    full = EVALUATIONS_PER_ENTRY * entries
    screen = EVALUATIONS_PER_DIRECTION * per_parameter  # one group of every tensor, if it agrees
    if mode == "auto":
        mode = "full" if full <= max(AUTO_EVALUATIONS, screen) else "screen"
        why = f"auto: {entries} entries, ~{full} evaluations entry by entry vs ~{screen} along directions"
    else:
        why = f"--oracle-mode {mode}"
    if mode not in ("full", "screen"):
        raise ValueError(f"`oracle_mode` must be one of auto, full, screen; found {mode!r}.")
    return Plan(mode, why, [], per_parameter, Clock(budget))


def batch_guard(call: Call) -> Callable[[Callable[[], Any]], Any]:
    """Each batch of evaluations through the engine's guarded call; a failure raises ``OracleFailed``."""

    def guard(thunk: Callable[[], Any]) -> Any:
        out = call(thunk)
        if out.error:
            raise OracleFailed(out.error)
        return out.value

    return guard


def difference(
    function: Function, point: Point, chosen: Plan, call: Call, progress: Progress | None
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


def _difference(function: Function, params: dict, chosen: Plan, guard: Any, tick: Any) -> Differences:
    """The oracle's differences of ``function`` at the point's ``params``: entry by entry (``estimate``
    works on its own float64 copy), or along the plan's directions."""
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
    is cast to float64 where it is handed (``Line.hold``), else here (issue 38: a float64 copy of the
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


# -- the functions ---------------------------------------------------------------------------------------


def numpy_function(workload: Losses, point: Point) -> Function | None:
    """The workload's NumPy ``reference`` (or ``surrogate``) at the point; None without a reference.

    Raises:
        ValueError: the reference or the surrogate raised, or is not a finite float at the point.
    """
    if workload.reference is None:
        return None
    p64, i64 = as_dtype(point.params, "float64"), read_only(as_dtype(point.inputs, "float64"))
    reference = workload.reference
    # Read-only, as the oracle's: a reference that writes to its arrays fails here, in one line.
    value = _finite_loss(workload, "reference", lambda: reference(read_only(p64), i64))
    if workload.surrogate is None:
        return Function("the NumPy reference", None, lambda p: reference(p, i64), value)
    try:
        built = workload.surrogate({k: v.copy() for k, v in p64.items()}, i64)
    except BaseException as exc:
        reraise_user_interrupt(exc)
        raise ValueError(
            f"workload `{workload.name}`: `surrogate(params, inputs)` raised {describe(exc, '`surrogate`')}"
        ) from exc
    if not callable(built):
        raise ValueError(
            f"workload `{workload.name}`: `surrogate(params, inputs)` must return a function of the "
            f"parameters, found {type(built).__name__}."
        )
    _finite_loss(workload, "surrogate", lambda: built(dict(p64)))
    return Function("the NumPy surrogate", None, built, value)


def _attribute(backend: Any, name: str) -> Any:
    """``backend.<name>``, or None where it is missing or raises (a property that raises)."""
    try:
        return getattr(backend, name, None)
    except BaseException as exc:
        reraise_user_interrupt(exc)
        return None


def own_loss(
    backend: Any,
    name: str,
    point: Point,
    call: Call,
    clock: Clock | None = None,
    *,
    keep: bool = False,
    cache: dict | None = None,
) -> Function | Skip:
    """``name``'s own loss in float64, checked (see the module docstring), or why it cannot be used.

    With the oracle's ``clock`` the noise probe's evaluations count toward its budget (``oracle.budget``),
    under their own label: a budget spent before or during the probe leaves the loss not differenced.
    What the adapter holds of these evaluations is released after them (``releaser``), and by the
    oracle after each of its differences of the function (``Function.release``); with ``keep``, a
    ``Function``'s adapter keeps the point its probe held on the line (``Line.holding``) for the
    differences that follow at once, which release it. ``cache`` keeps the probe's signs for the run's
    other probes (``Plan.drawn``).
    """
    let_go = releaser(backend, call)
    found: Function | Skip | None = None
    try:
        found = _own_loss(backend, name, point, call, clock, let_go, cache)
        return found
    finally:
        if not (keep and isinstance(found, Function)):
            release(found.release if isinstance(found, Function) else let_go)


def _own_loss(
    backend: Any,
    name: str,
    point: Point,
    call: Call,
    clock: Clock | None,
    let_go: Callable[[], Any] | None,
    cache: dict | None,
) -> Function | Skip:
    loss = _attribute(backend, "loss")
    if not callable(loss):
        return Skip(f"`{name}` has no `loss(params, inputs)` method: its own loss is not differenced")
    i64 = read_only(as_dtype(point.inputs, "float64"))
    line = line_of(backend, call, i64, point.params)
    # float32 first, arrays made for the call and handed without a second copy: not beside the float64
    # point the line then holds (issue 38); no float64 copy of the oracle's own: the line is handed a
    # cast made for it (``Line.hold``), the probe without a line makes its own
    p, i = call.cast(point.params, "float32", once=True), call.cast(point.inputs, "float32", once=True)
    narrow = call(loss, p, i, convert="array")
    wide = at_point(line, loss, point, call)  # on the line, the point held for the probe
    if wide.error:
        return Skip(f"`{name}`'s loss failed in float64: {wide.error}", failure=True)
    value = np.asarray(wide.value)
    if value.size != 1 or not np.all(np.isfinite(value)):
        found = f"shape {value.shape}" if value.size != 1 else f"{float(value.ravel()[0])}"
        return Skip(f"`{name}`'s float64 loss must be one finite number, found {found}", failure=True)
    number = float(value.ravel()[0])
    if value.dtype != np.float64:
        return Skip(
            f"`{name}`'s loss came back in {value.dtype.name} from float64 inputs: it does not compute in "
            "float64, so its own loss is not differenced"
        )
    rounding, low = 0.0, None
    if narrow.error is None and np.size(narrow.value) == 1:
        low = float(np.asarray(narrow.value, np.float64).ravel()[0])
        if low == number and number != math.floor(number):
            return Skip(
                f"`{name}`'s float64 loss equals its float32 loss bit for bit: it does not compute in "
                "float64 (a module pinned to float32?), so its own loss is not differenced"
            )
        rounding = WIDEN * abs(low - number)
    fn = _batched(backend, loss, i64)
    label = f"`{name}`'s own float64 loss"
    guard = batch_guard(call)
    if clock is not None:
        guard = clock.guard(guard, probe_label(label))
    plan = None if clock is None else functools.partial(clock.plan, probe_label(label))
    try:
        with one_thread(sum(int(v.size) for v in point.params.values())):
            precision = probed(fn, point.params, guard, line, number, low, name, plan, cache)
    except OracleFailed as exc:
        if clock is not None and clock.ran_out:
            return Skip(f"`{name}`'s own loss is not differenced: {exc}", failure=True)
        return Skip(f"`{name}`'s loss failed near the point in float64: {exc}", failure=True)
    if precision.float32:  # float32's noise: the value's rounding and each evaluation's
        rounding = max(rounding, precision.noise)
    return Function(label, name, fn, number, rounding, precision, _released(let_go, line), line)


def _released(let_go: Callable[[], Any] | None, line: Line | None) -> Callable[[], Any] | None:
    """``let_go``, after which ``line`` (where there is one) hands its point again (``Line.releasing``)."""
    return let_go if line is None else line.releasing(let_go)


def releaser(backend: Any, call: Call) -> Callable[[], Any] | None:
    """What drops the arrays ``backend`` holds of its last loss evaluations (its optional
    ``release_evaluations()``, through the guarded call), or None where it has none (a backend in a
    worker process, ``--isolate``, is asked in its worker: ``isolate_worker.METHODS``)."""
    method = _attribute(backend, "release_evaluations")
    return (lambda: call(method)) if callable(method) else None


def release(let_go: Callable[[], Any] | None) -> None:
    """``let_go()`` where there is one. What it returns is not read: the arrays are only memory (a
    release that failed leaves them held), and an adapter compares their bits before reusing any."""
    if let_go is not None:
        let_go()


def probe_label(label: str) -> str:
    """The budget's label for the noise probe of the function ``label``."""
    return f"{label}: its noise probe"


def _batched(backend: Any, loss: Callable[..., Any], i64: dict[str, np.ndarray]) -> Callable[[dict], Any]:
    """``loss(params, inputs)`` of the parameters, batched (``oracle.batched``) where the adapter has
    ``losses(params, inputs, batched)``."""
    one = lambda p: loss(p, i64)  # noqa: E731
    losses = _attribute(backend, "losses")
    if not callable(losses):
        return one
    return Batched(one, lambda p, names: losses(p, i64, names))


def _finite_loss(workload: Losses, what: str, call: Callable[[], Any]) -> float:
    """The user's loss at the case's point, which must be a finite float (else a ``ValueError``)."""
    try:
        value = call()
    except BaseException as exc:  # the workload's own code: its sys.exit is a bad workload, not the end
        reraise_user_interrupt(exc)
        raise ValueError(
            f"workload `{workload.name}`: the `{what}` loss raised at the case's point: "
            f"{describe(exc, f'the `{what}` loss')}"
        ) from exc
    try:
        number = float(value)
    except (TypeError, ValueError) as exc:
        raise ValueError(
            f"workload `{workload.name}`: the `{what}` loss must return a float, found "
            f"{type(value).__name__} {value!r:.60}."
        ) from exc
    if not math.isfinite(number):
        raise ValueError(
            f"workload `{workload.name}`: the `{what}` loss must be finite at the case's point, "
            f"found {number}."
        )
    return number
