"""``crosscheck.run``: check the options, make the plan, drive it (``crosscheck._engine.driver``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from crosscheck._engine.driver import drive
from crosscheck._engine.plan import Plan
from crosscheck._engine.quantity import quantity as _quantity
from crosscheck._registry import ORACLE
from crosscheck._report.report import Report
from crosscheck._workloads.protocol import Options, Progress
from crosscheck._workloads.registry import load_workload

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
) -> Report:
    """Run one case (generated, or the given arrays) and cross-check every backend's gradient.

    Args:
        weights, x: your own arrays (``(L, d, d)``, ``(N, d)``, float32 or float64), both or neither;
            else ``layers``, ``batch``, ``dim``, ``dtype``, ``seed``, ``init``, ``scale`` (see ``Case``).
        backends: names, import strings, backend objects or plain functions (default: every built-in
            but the reference; a workload's implementations).
        reference: the backend the others are compared with (default: the ``numpy-fd`` oracle).
        rtol, atol: user slack added to every entry's tolerance; give both or neither.
        strict: fail when any entry is unjudgeable (a ReLU kink makes it ambiguous).
        oracle_mode, directions: ``"full"`` (every entry), ``"screen"`` (``directions`` random
            directional derivatives per layer of the stack, per parameter tensor of a workload, then
            every entry of one that fails them) or ``"auto"`` (screen when the full oracle would cost
            more: ``SCREEN_FLOPS`` for the stack, ``AUTO_EVALUATIONS`` loss evaluations for a workload).
        explain: also localize (forward activations layer by layer) and classify a disagreement.
        progress: called as ``progress(description, done, total)`` during long work.
        quantity: ``"grad"`` or ``"hvp"``, the Hessian-vector product along a direction made from
            ``seed`` (candidates need ``hvp(weights, x, v)``; see README, "Hessian-vector products").
        workload: a ``Workload``, a built-in name or an import string ``module:attribute`` (default:
            the stack). Another workload makes its own arrays: only ``dtype`` and ``seed`` of the case
            keywords apply, and its comparisons are one per (backend, parameter).
        repeat: calls per candidate: a second result beyond its own rounding fails it (1: no repeat).

    Returns:
        A ``Report``: ``.passed`` and ``.to_dict()`` (the JSON report).

    Raises:
        ValueError, TypeError: bad arguments (the message says what was expected and found).

    Example:
        >>> crosscheck.run(layers=3, dim=4, backends=["jax"]).passed  # doctest: +SKIP
        True
    """
    given = dict(locals())
    _check_options(rtol, atol, repeat, directions, backends)
    return drive(_plan(given))


def _plan(given: dict[str, Any]) -> Plan:
    """The plan of ``run``'s keywords: the workload takes the case keywords that apply to it (and says
    which do not), its judge the quantity, then the candidates."""
    chosen = load_workload(given["workload"])
    point = chosen.point({k: given[k] for k in CASE_KEYWORDS})
    names = ("rtol", "atol", "strict", "seed", "oracle_mode", "directions", "explain", "progress")
    options = Options(**{k: given[k] for k in names})
    what = _quantity(given["quantity"])
    judge = chosen.judge(what, point, options)
    backends, reference = given["backends"], given["reference"]
    specs = list(backends) if backends is not None else chosen.defaults(reference)
    chosen.check_candidates(specs)
    return Plan(chosen, what, point, judge, specs, reference, backends is not None, options, given["repeat"])


def _check_options(rtol: Any, atol: Any, repeat: Any, directions: Any, backends: Any) -> None:
    _check_tolerances(rtol, atol)
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
