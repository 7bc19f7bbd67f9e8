"""``crosscheck.run``: check the options, make the plan, drive it (``crosscheck._engine.driver``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from crosscheck._backends import ORACLE
from crosscheck._engine.driver import drive
from crosscheck._engine.plan import Plan
from crosscheck._engine.quantity import quantity as _quantity
from crosscheck._files import available_memory, format_bytes
from crosscheck._report.report import Report
from crosscheck._workloads.protocol import Options, Progress
from crosscheck._workloads.registry import load_workload
from crosscheck._workloads.stack.workload import StackWorkload

#: The keywords of ``run`` that make the case (each workload takes those that apply to it).
CASE_KEYWORDS: tuple[str, ...] = ("weights", "x", "layers", "batch", "dim", "dtype", "seed", "init", "scale")
CASE_KEYWORDS += ("oracle_mode", "directions", "explain", "quantity")


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
    explain: bool = False,
    progress: Progress | None = None,
    quantity: str = "grad",
    workload: Any = None,
    repeat: int = 2,
    isolate: bool | str = "auto",
    timeout: float | None = None,
) -> Report:
    """Run one case (generated, or the given arrays) and cross-check every backend's gradient.

    Args:
        weights: your own weights ``(L, d, d)`` (float32 or float64) with ``x``; else ``layers``,
            ``batch``, ``dim``, ``dtype``, ``seed``, ``init`` and ``scale`` make the case (see ``Case``).
        x: your own inputs ``(N, d)``, with ``weights``.
        backends: names, import strings, objects or functions (default: ``jax``, ``torch``, ``numpy-fd``
            less the reference, the variants only when named; a workload's implementations).
        reference: the backend the others are compared with (default: the ``numpy-fd`` oracle).
        rtol: user slack, relative, added to every entry's tolerance; with ``atol`` or not at all.
        atol: user slack, absolute.
        strict: fail when any entry is unjudgeable (a ReLU kink makes it ambiguous).
        oracle_mode: ``"full"`` (every entry), ``"screen"`` (random directional derivatives, then every
            entry of a layer or workload tensor that fails) or ``"auto"`` (screen past ``SCREEN_FLOPS``, or
            a workload's ``AUTO_EVALUATIONS``); either quantity. directions: per layer or tensor, screening.
        explain: also localize (forward activations layer by layer) and classify a disagreement.
        progress: called as ``progress(description, done, total)``.
        quantity: ``"grad"``, or ``"hvp"`` along a direction made from ``seed`` (``hvp(weights, x, v)``).
        workload: a ``Workload``, a built-in name or an import string ``module:attribute`` (default:
            the stack). Another workload makes its own arrays (only ``dtype`` and ``seed`` apply).
        repeat: calls per candidate: a second result beyond its own rounding fails it (1: no repeat).
        isolate: a worker process per backend (its crash is its failure): ``True`` each named by a
            spec, ``"auto"`` import strings and plugins, ``False`` none.
        timeout: seconds a backend call may take before it is that backend's failure (None: no limit).

    Returns:
        A ``Report``: ``.passed`` and ``.to_dict()`` (the JSON report).

    Raises:
        ValueError, TypeError: bad arguments, said in one line (a mismatch is a record, never raised).
    """
    given = dict(locals())
    _check_options(rtol, atol, repeat, directions, backends, isolate, timeout)
    return drive(_plan(given))


def _plan(given: dict[str, Any]) -> Plan:
    """The plan of ``run``'s keywords: the workload takes the case keywords that apply to it (and says
    which do not), its judge the quantity, then the candidates."""
    chosen = load_workload(given["workload"])
    backends, reference = given["backends"], given["reference"]
    check_memory(chosen, {k: given[k] for k in CASE_KEYWORDS}, list(backends or ()))
    point = chosen.point({k: given[k] for k in CASE_KEYWORDS})
    names = ("rtol", "atol", "strict", "seed", "oracle_mode", "directions", "explain", "progress")
    options = Options(**{k: given[k] for k in names})
    what = _quantity(given["quantity"])
    judge = chosen.judge(what, point, options)
    specs = list(backends) if backends is not None else chosen.defaults(reference)
    chosen.check_candidates(specs)
    return Plan(
        chosen,
        what,
        point,
        judge,
        specs,
        reference,
        backends is not None,
        options,
        given["repeat"],
        isolate=given["isolate"],
        timeout=None if given["timeout"] is None else float(given["timeout"]),
        workload_spec=_workload_spec(given["workload"]),
    )


def check_memory(workload: Any, given: dict[str, Any], specs: list[Any]) -> dict[str, int]:
    """The bytes the case needs, by part (``workload.memory``, when it estimates), before anything is
    allocated.

    Raises:
        MemoryTooLarge: more than this machine has available (the message gives the estimate).
    """
    memory = getattr(workload, "memory", None)
    parts = memory(given, specs) if callable(memory) else {}
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


def _workload_spec(workload: Any) -> str | None:
    """How a worker process loads the workload again: its name or import string (None: an object)."""
    if workload is None or isinstance(workload, StackWorkload):
        return "stack"
    return workload if isinstance(workload, str) else None


def _check_isolation(isolate: Any, timeout: Any) -> None:
    if not (isinstance(isolate, bool) or isolate == "auto"):
        raise TypeError(f"`isolate` must be True, False or 'auto', found {isolate!r:.60}.")
    if timeout is None:
        return
    number = isinstance(timeout, (int, float)) and not isinstance(timeout, bool)
    if not (number and np.isfinite(timeout) and timeout > 0):
        raise ValueError(f"`timeout` must be a positive number of seconds, found {timeout!r:.60}.")


def _check_options(*given: Any) -> None:
    rtol, atol, repeat, directions, backends, isolate, timeout = given
    _check_tolerances(rtol, atol)
    _check_isolation(isolate, timeout)
    for name, value in (("repeat", repeat), ("directions", directions)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"`{name}` must be a positive integer, found {value!r}.")
    if backends is not None and (isinstance(backends, (str, bytes)) or not isinstance(backends, Sequence)):
        found = f"{type(backends).__name__} {backends!r:.60}"
        raise TypeError(f"`backends` must be a list of backends, found {found}.")


def _check_tolerances(rtol: float | None, atol: float | None) -> None:
    if (rtol is None) != (atol is None):
        raise ValueError(
            "`rtol` and `atol` must be given together or not at all; found only "
            f"`{'rtol' if atol is None else 'atol'}`."
        )
    for name, value in (("rtol", rtol), ("atol", atol)):
        if value is not None and not (np.isfinite(value) and value >= 0):
            raise ValueError(f"`{name}` must be a non-negative finite number, found {value!r}.")
