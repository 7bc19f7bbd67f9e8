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
CASE_KEYWORDS = ("weights", "x", "layers", "batch", "dim", "dtype", "seed", "init", "scale")
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
        weights, x: your own arrays (``(L, d, d)`` and ``(N, d)``, float32 or float64), given together;
            otherwise the case options below generate them.
        layers, batch, dim, dtype, seed, init, scale: the generated case (see ``Case``).
        backends: names, import strings, backend objects or plain functions; default: every built-in
            backend except the reference.
        reference: the backend the others are compared with (default: the ``numpy-fd`` oracle).
        rtol, atol: user slack added to every entry's tolerance; give both or neither.
        strict: fail when any entry is unjudgeable (a ReLU kink makes it ambiguous).
        oracle_mode: ``"full"`` (every entry), ``"screen"`` (``directions`` random directional
            derivatives per layer, then every entry of each layer that fails them) or ``"auto"``
            (screen when the full oracle would cost more than ``SCREEN_FLOPS``).
        directions: directions per layer when screening.
        explain: also compare each candidate's forward activations layer by layer (when it exposes
            ``activations(weights, x)``), to say where a disagreement starts.
        progress: called as ``progress(description, done, total)`` during long work.
        quantity: ``"grad"`` (the gradient) or ``"hvp"``: the Hessian-vector product ``H v`` of the loss
            with respect to the weights, along a direction ``v`` made from ``seed`` (see README,
            "Hessian-vector products"); candidates need an ``hvp(weights, x, v)`` method.
        repeat: how many times each candidate is called (gradcheck's reentrancy check): a second result
            that differs beyond the candidate's rounding fails it; ``1`` turns the check off.
        workload: a ``Workload``, a built-in workload name or an import string ``module:attribute``;
            default (or ``"stack"``): the ReLU stack. Another workload defines its own arrays, so only
            ``dtype``, ``seed``, ``backends``, ``reference``, ``rtol``/``atol`` and ``strict`` apply;
            its comparisons are one per (backend, parameter).

    Returns:
        A ``Report``: ``.passed`` and ``.to_dict()`` (the JSON report).

    Raises:
        ValueError, TypeError: bad arguments (the message says what was expected and found).

    Example:
        >>> import crosscheck
        >>> crosscheck.run(layers=3, dim=4, backends=["jax"]).passed  # doctest: +SKIP
        True
    """
    _check_tolerances(rtol, atol)
    if isinstance(repeat, bool) or not isinstance(repeat, int) or repeat < 1:
        raise ValueError(f"`repeat` must be a positive integer, found {repeat!r}.")
    if isinstance(directions, bool) or not isinstance(directions, int) or directions < 1:
        raise ValueError(f"`directions` must be a positive integer, found {directions!r}.")
    if backends is not None and (isinstance(backends, (str, bytes)) or not isinstance(backends, Sequence)):
        raise TypeError(
            f"`backends` must be a list of backends, found {type(backends).__name__} {backends!r:.60}."
        )
    given = dict(locals())
    chosen = load_workload(workload)
    # Each workload takes the case keywords that apply to it (and says which do not).
    point = chosen.point({k: given[k] for k in CASE_KEYWORDS})
    options = Options(rtol, atol, strict, seed, oracle_mode, directions, explain, progress)
    what = _quantity(quantity)
    judge = chosen.judge(what, point, options)
    specs = list(backends) if backends is not None else chosen.defaults(reference)
    chosen.check_candidates(specs)
    explicit = backends is not None
    return drive(Plan(chosen, what, point, judge, specs, reference, explicit, options, repeat))


def _check_tolerances(rtol: float | None, atol: float | None) -> None:
    if (rtol is None) != (atol is None):
        raise ValueError(
            "`rtol` and `atol` must be given together or not at all; found only "
            f"`{'rtol' if atol is None else 'atol'}`."
        )
    for name, value in (("rtol", rtol), ("atol", atol)):
        if value is not None and not (np.isfinite(value) and value >= 0):
            raise ValueError(f"`{name}` must be a non-negative finite number, found {value!r}.")
