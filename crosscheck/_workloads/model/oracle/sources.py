"""The float64 functions the workload oracle differences: where each comes from, checked before it is.

The workload's NumPy ``reference`` (or its ``surrogate``: ``numpy_function``), or an implementation's
*own* loss (``own_loss``), evaluated in float64 without autodiff (the adapter's ``loss(params,
inputs)``: PyTorch under ``torch.no_grad()``, JAX compiled but never differentiated); each a
``function.Function`` that ``function.difference`` differences.

An implementation's float64 loss is checked before it is differenced: it must come back as one float64
number, finite, and differ from the float32 evaluation (a module pinned to float32 computes the same
bits in both; its "float64" loss cannot be differenced). It is then probed for its noise
(``precision.probe``): a loss with float32 steps inside (Hugging Face's softmax and norms upcast "to
float32") has float32's, which becomes its rounding, and it is differenced with float32's step and
error bar (``entries.FLOAT32_MAXITER``, ``entries.FLOAT32_FRACTION``).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from crosscheck._compare.constants import WIDEN
from crosscheck._compare.dtypes import as_dtype
from crosscheck._errors import describe, reraise_user_interrupt
from crosscheck._types import Loaded
from crosscheck._workloads.model.oracle.batched import Batched
from crosscheck._workloads.model.oracle.budget import Clock
from crosscheck._workloads.model.oracle.entries import OracleFailed, read_only
from crosscheck._workloads.model.oracle.function import Function, Losses, Skip, batch_guard, release
from crosscheck._workloads.model.oracle.line import Line, at_point, line_of
from crosscheck._workloads.model.oracle.one_thread import one_thread
from crosscheck._workloads.model.oracle.precision import probed
from crosscheck._workloads.protocol import Call, Point


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


def _attribute(backend: Loaded, name: str) -> object:
    """``backend.<name>``, or None where it is missing or raises (a property that raises)."""
    try:
        return getattr(backend, name, None)
    except BaseException as exc:
        reraise_user_interrupt(exc)
        return None


def own_loss(
    backend: Loaded,
    name: str,
    point: Point,
    call: Call,
    clock: Clock | None = None,
    *,
    keep: bool = False,
    cache: dict | None = None,
    progress: Callable[[str, int, int], None] | None = None,
) -> Function | Skip:
    """``name``'s own loss in float64, checked (see the module docstring), or why it cannot be used.

    With the oracle's ``clock`` the noise probe's evaluations count toward its budget (``oracle.budget``),
    under their own label: a budget spent before or during the probe leaves the loss not differenced.
    What the adapter holds of these evaluations is released after them (``releaser``), and by the
    oracle after each of its differences of the function (``Function.release``); with ``keep``, a
    ``Function``'s adapter keeps the point its probe held on the line (``Line.holding``) for the
    differences that follow at once, which release it. ``cache`` keeps the probe's signs for the run's
    other probes (``Differencing.drawn``). ``progress``: told of the probe's evaluations as they are made
    (with the ``clock``), so that a long probe of a large model is not silent.
    """
    let_go = releaser(backend, call)
    found: Function | Skip | None = None
    try:
        found = _own_loss(backend, name, point, call, clock, let_go, cache, progress)
        return found
    finally:
        if not (keep and isinstance(found, Function)):
            release(found.release if isinstance(found, Function) else let_go)


def _own_loss(
    backend: Loaded,
    name: str,
    point: Point,
    call: Call,
    clock: Clock | None,
    let_go: Callable[[], Any] | None,
    cache: dict | None,
    progress: Callable[[str, int, int], None] | None = None,
) -> Function | Skip:
    loss = _attribute(backend, "loss")
    if not callable(loss):
        return Skip(f"`{name}` has no `loss(params, inputs)` method: its own loss is not differenced")
    i64 = read_only(as_dtype(point.inputs, "float64"))
    line = line_of(backend, call, i64, point.params)
    # float32 first, arrays made for the call and handed without a second copy: not beside the float64
    # point the line then holds; no float64 copy of the oracle's own: the line is handed a
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
        guard = clock.guard(guard, probe_label(label), progress)
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


def releaser(backend: Loaded, call: Call) -> Callable[[], Any] | None:
    """What drops the arrays ``backend`` holds of its last loss evaluations (its optional
    ``release_evaluations()``, through the guarded call), or None where it has none (a backend in a
    worker process, ``--isolate``, is asked in its worker: ``isolate_worker.METHODS``)."""
    method = _attribute(backend, "release_evaluations")
    return (lambda: call(method)) if callable(method) else None


def probe_label(label: str) -> str:
    """The budget's label for the noise probe of the function ``label``."""
    return f"{label}: its noise probe"


def _batched(backend: Loaded, loss: Callable[..., Any], i64: dict[str, np.ndarray]) -> Callable[[dict], Any]:
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
