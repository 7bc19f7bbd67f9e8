"""The front door: ``crosscheck.check`` (a workload and option records in, a ``Report`` out) and
``crosscheck.run``, the flat adapter of earlier releases, which builds the records and the workload and
calls ``check``. ``plan`` decides everything before any backend runs (the CLI calls it and ``drive``
itself, to say how much memory the case needs from the same estimate that refuses one too large).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Sequence
from typing import Any

from crosscheck._backends import ORACLE
from crosscheck._engine import contained_run
from crosscheck._engine.driver import drive
from crosscheck._engine.plan import Plan
from crosscheck._engine.quantity import QUANTITIES
from crosscheck._engine.quantity import quantity as _quantity
from crosscheck._engine.records import Execution, Oracle, Slack
from crosscheck._files import available_memory, format_bytes
from crosscheck._report.report import Report
from crosscheck._workloads.protocol import EngineWorkload, Options, Progress
from crosscheck._workloads.registry import load_workload


def check(
    workload: Any = None,
    *,
    backends: Sequence[Any] | None = None,
    reference: Any = ORACLE,
    dtype: str = "float32",
    seed: int = 0,
    quantity: str = "grad",
    slack: Slack | None = None,
    strict: bool = False,
    oracle: Oracle = Oracle(),  # noqa: B008 (frozen: one instance serves every call)
    execution: Execution = Execution(),  # noqa: B008
    progress: Progress | None = None,
) -> Report:
    """Cross-check every backend's quantity on ``workload`` against the reference.

    Args:
        workload: a ``Stack`` (default: ``Stack()``), a ``Workload``, a ``Port``, a built-in name or an
            import string ``module:attribute`` naming one (loaded once). An import string is code from
            elsewhere: the whole check runs in one worker process, and its crash or hang is a failed
            report naming it, unless ``execution.isolate`` is False or a backend is an object; a
            workload given as an object runs in this process.
        backends: names, import strings, objects or functions (default: ``jax``, ``torch``,
            ``numpy-fd`` less the reference for the stack; a workload's implementations).
        reference: the backend the others are compared with (default: the ``numpy-fd`` oracle).
        dtype: ``"float32"`` or ``"float64"``, of the arrays the workload makes (yours keep theirs).
        seed: seed of the arrays the workload makes (and of the HVP's direction).
        quantity: ``"grad"``, or ``"hvp"`` along a direction made from ``seed`` (``hvp(weights, x, v)``).
        slack: your ``Slack`` added to every entry's tolerance (None: none).
        strict: fail when any entry is unjudgeable (a ReLU kink makes it ambiguous).
        oracle: how the reference judges (``Oracle``: full, screened or chosen by cost).
        execution: how each backend is run (``Execution``: repeats, worker processes, timeout).
        progress: called as ``progress(description, done, total)``.

    Returns:
        A ``Report``: ``.passed`` and ``.to_dict()`` (the JSON report).

    Raises:
        ValueError, TypeError: bad arguments, in one line (a mismatch is a record, never raised); the
            workload's own code failed before any backend ran (its ``generate``, a port's ``inputs``:
            whatever it raised, ``sys.exit`` included, in one line naming it). Code that runs inside a
            backend (an implementation, a backend's factory) is that backend's failure record instead.

    Example:
        >>> import crosscheck
        >>> stack = crosscheck.Stack(layers=3, dim=4)
        >>> report = crosscheck.check(stack, oracle=crosscheck.Oracle("full"))  # doctest: +SKIP
    """
    if contained_run.wanted(workload, backends, reference, execution):  # code from elsewhere
        _check_records(slack, oracle, execution, backends)
        given = {"backends": backends, "reference": reference, "dtype": dtype, "seed": seed}
        given.update(quantity=quantity, strict=strict)
        return contained_run.check(
            workload, None, slack=slack, oracle=oracle, execution=execution, progress=progress, **given
        )
    planned = plan(
        load_workload(workload),
        backends=backends,
        reference=reference,
        dtype=dtype,
        seed=seed,
        quantity=quantity,
        slack=slack,
        strict=strict,
        oracle=oracle,
        execution=execution,
        progress=progress,
    )
    return drive(planned)


def plan(
    workload: EngineWorkload,
    *,
    backends: Sequence[Any] | None,
    reference: Any,
    dtype: str,
    seed: int,
    quantity: str,
    slack: Slack | None,
    strict: bool,
    oracle: Oracle,
    execution: Execution,
    progress: Progress | None,
) -> Plan:
    """The plan of a loaded workload and the records (``check``'s arguments): its memory estimated (and
    refused when too large) before anything is allocated, then its point, its judge, the candidates."""
    _check_records(slack, oracle, execution, backends)
    options = Options(
        rtol=None if slack is None else slack.rtol,
        atol=None if slack is None else slack.atol,
        strict=strict,
        seed=seed,
        oracle_mode=oracle.mode,
        directions=oracle.directions,
        budget=oracle.budget,
        explain=workload.explain,
        progress=progress,
    )
    specs = list(backends or ())
    memory = check_memory(workload, dtype=dtype, quantity=quantity, options=options, candidates=specs)
    point = workload.point(dtype=dtype, seed=seed)
    what = _quantity(quantity)
    judge = workload.judge(what, point, options)
    if oracle.budget is not None and not getattr(judge, "budgeted", False):
        raise ValueError(
            f"`budget` applies to the model oracle (a crosscheck.Workload or Port); workload "
            f"`{workload.name}` is judged without it."
        )
    candidates = list(backends) if backends is not None else workload.defaults(reference)
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
        memory=memory,
    )


def _check_records(slack: Any, oracle: Any, execution: Any, backends: Any) -> None:
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


def check_memory(workload: Any, **case: Any) -> dict[str, int]:
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


class MemoryTooLarge(ValueError):
    """A case that cannot fit in this machine's memory (refused before anything is allocated)."""


def run(
    *,
    weights: Any = None,
    x: Any = None,
    layers: int = 8,
    batch: int = 8,
    dim: int = 16,
    dtype: str = "float32",
    seed: int = 0,
    init: str = "gaussian",
    scale: float = 1.0,
    backends: Sequence[Any] | None = None,
    reference: Any = ORACLE,
    rtol: float | None = None,
    atol: float | None = None,
    strict: bool = False,
    oracle_mode: str = "auto",
    directions: int = 4,
    budget: float | None = None,
    explain: bool = False,
    progress: Progress | None = None,
    quantity: str = "grad",
    workload: Any = None,
    repeat: int = 2,
    isolate: bool | str = "auto",
    timeout: float | None = None,
    steps: int | None = None,
) -> Report:
    """Run one case (generated, or the given arrays) and cross-check every backend's gradient: the flat
    form of ``check``, which it calls with the workload and the records it builds from these keywords.

    Args:
        weights: your own weights ``(L, d, d)`` (float32 or float64) with ``x`` (``Stack.from_arrays``);
            else ``layers``, ``batch``, ``dim``, ``init`` and ``scale`` make the ``Stack``.
        x: your own inputs ``(N, d)``, with ``weights``.
        dtype: as for ``check``, as are ``seed``, ``backends``, ``reference``, ``strict``, ``progress``.
        rtol: user slack, relative, added to every entry's tolerance; with ``atol`` or not at all (``Slack``).
        atol: user slack, absolute.
        oracle_mode: ``"full"``, ``"screen"`` or ``"auto"``, with ``directions`` and ``budget``, the model
            oracle's seconds at most (``Oracle``).
        explain: also localize (forward activations layer by layer) and classify a disagreement (``Stack``).
        quantity: ``"grad"``, or ``"hvp"`` along a direction made from ``seed`` (``hvp(weights, x, v)``).
        workload: a ``Stack``, a ``Workload``, a built-in name or an import string ``module:attribute``
            (default: the stack); another workload makes its own arrays (only ``dtype`` and ``seed`` apply).
        repeat: calls per candidate, with ``isolate`` and ``timeout`` (``Execution``).
        steps: optimizer steps per side of a ``Train`` workload (``quantity="update"``; default: its own).

    Returns:
        A ``Report``: ``.passed`` and ``.to_dict()`` (the JSON report).

    Raises:
        ValueError, TypeError: bad arguments, said in one line (a mismatch is a record, never raised).

    Example:
        >>> def zeros(weights, x):  # a wrong gradient
        ...     return np.zeros_like(weights)
        >>> crosscheck.run(layers=2, dim=4, batch=3, seed=1, backends=[zeros]).passed
        False
        >>> crosscheck.run(dim=16, dtype="float32", backends=["jax", "torch"]).passed  # doctest: +SKIP
        True
    """
    records = _records(rtol, atol, (oracle_mode, directions, budget), repeat, isolate, timeout, backends)
    knobs = {"weights": weights, "x": x, "layers": layers, "batch": batch, "dim": dim, "init": init}
    knobs.update(scale=scale, explain=explain, steps=steps)
    given = {"backends": backends, "reference": reference, "dtype": dtype, "seed": seed, "strict": strict}
    if contained_run.wanted(workload, backends, reference, records["execution"]):  # code from elsewhere
        changed = _changed(knobs)
        return contained_run.check(
            workload, changed, quantity=quantity, progress=progress, **given, **records
        )
    chosen = configure(load_workload(workload), _changed(knobs), quantity=quantity)
    return check(chosen, quantity=quantity, progress=progress, **given, **records)


def _records(*flat: Any) -> dict[str, Any]:
    """``check``'s records of ``run``'s flat keywords (validated in ``run``'s order: the tolerances, the
    worker processes and the timeout, the repeats, the directions, the backends)."""
    rtol, atol, (oracle_mode, directions, budget), repeat, isolate, timeout, backends = flat
    slack = Slack.of(rtol, atol)
    execution = Execution(repeat=repeat, isolate=isolate, timeout=timeout)
    oracle = Oracle(mode=oracle_mode, directions=directions, budget=budget)
    _check_records(slack, oracle, execution, backends)
    return {"slack": slack, "oracle": oracle, "execution": execution}


def configure(workload: Any, given: dict[str, Any], *, quantity: str) -> Any:
    """``workload`` with the options ``given`` to ``run`` (those left at their defaults omitted) set:
    ``ValueError`` for the first it does not take, or a quantity it has no judge for."""
    for name in [*given, "quantity"]:
        takes = name in workload.takes if name != "quantity" else _takes_quantity(workload, quantity)
        if not takes:
            whose = "a Train workload" if name == "steps" or quantity == "update" else "the stack workload"
            raise ValueError(
                f"`{name}` applies to {whose} only; workload `{workload.name}` defines its own "
                f"arrays (give `dtype` and `seed`)."
            )
    return workload.configure(**given) if given else workload


def _takes_quantity(workload: Any, quantity: str) -> bool:
    """A quantity the workload has no judge for does not apply to it (an unknown one is ``check``'s)."""
    return quantity not in QUANTITIES or quantity in workload.quantities


def _changed(given: dict[str, Any]) -> dict[str, Any]:
    """The keywords of ``run`` among ``given`` that are not at their defaults (an array always is)."""
    defaults = _run_defaults()
    return {name: value for name, value in given.items() if not _is_default(value, defaults[name])}


def _is_default(value: Any, default: Any) -> bool:
    if value is default:
        return True
    try:
        return default is not None and bool(value == default)
    except (ValueError, TypeError):  # an array where a number belongs: given (the workload says why)
        return False


@functools.cache
def _run_defaults() -> dict[str, Any]:
    return {name: p.default for name, p in inspect.signature(run).parameters.items()}
