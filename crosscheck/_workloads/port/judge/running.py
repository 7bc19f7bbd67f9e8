"""The running statistics of a port checked in training mode: each side's, after one training-mode
forward pass from the case's, compared as outputs and named by their module.

A port whose PyTorch module is in ``.train()`` is checked in training mode: every loss, gradient and
capture uses the batch's statistics on both sides (PyTorch's BatchNorm with its tracking off for the
call: ``sides.torch_training``; a linen module applied with its collections other than ``params``
mutable: ``JaxSide.apply``). What training mode also does, updating the running statistics, is one call
of each side of its own: PyTorch's buffers (``bn.running_mean``, ``bn.running_var``) after it, and the
JAX side's updated collection (``batch_stats``) read back through the port's mapping to the same
PyTorch names (a port with ``convert=``: PyTorch's put through the conversion and compared leaf by
leaf, ``running_convert``). Each is compared within both sides' rounding, measured by a re-run in the
other precision (float32 for a 16-bit case, whose statistics are compared as its dtype stores them;
PyTorch's is the reference: there is no oracle of a running average). A momentum in the
other library's convention (Flax keeps ``momentum`` of the old statistics, PyTorch takes ``momentum`` of
the new ones) fails here, at its module; the outputs and gradients cannot see it.

In eval mode the running statistics are inputs, not outputs: the check says they are not compared.
"""

from __future__ import annotations

import numpy as np

from crosscheck._compare import terms as _terms
from crosscheck._compare.compare import compare
from crosscheck._compare.constants import OTHER_DTYPE, UNIT_ROUNDOFF
from crosscheck._compare.dtypes import as_dtype, numpy_dtype, unit_roundoff
from crosscheck._compare.record import Comparison, Tolerance
from crosscheck._workloads.port.declare.build import Prepared
from crosscheck._workloads.port.judge import running_convert
from crosscheck._workloads.port.judge.verdict import Origin
from crosscheck._workloads.protocol import Call, Point

#: Each running statistic -> the positions of the JAX leaves it alone makes (``running_convert``; a
#: port without ``convert=`` reads its statistics back through the mapping, and needs none).
Paired = dict[str, list[int]]

#: Where a port's verdict says its difference starts when the running statistics lead it (its
#: ``starts_in``), and how a running-statistics row is named: ``"bn.running_var (running statistics)"``.
STARTS_IN = "running statistics"
ROW = f"({STARTS_IN})"
TERM_HELP = {
    "rounding": _terms.measured_help(
        "the port's rounding", "|its value - its re-run in the other precision|", "RMS"
    ),
    "reference": _terms.measured_help("PyTorch's rounding", "|float32 - float64|", "RMS", again=True),
    "floor": _terms.floor_help("the largest of PyTorch's running statistics"),
}


def statistics(prepared: Prepared) -> list[str]:
    """The running statistics a training-mode forward of the PyTorch module updates, mapped to a JAX
    leaf (``[]`` in eval mode)."""
    module = prepared.port.torch
    if not getattr(module, "training", False):
        return []
    from crosscheck._workloads.port.sides.torch_training import statistics as of

    mapped = {e.torch.name for e in prepared.table.mapped() if e.torch is not None and e.jax is not None}
    return [k for k in of(module) if k in mapped]


def not_compared(prepared: Prepared) -> str:
    """What an eval-mode check says of the running statistics ("" when the module has none)."""
    module = prepared.port.torch
    if getattr(module, "training", False):
        return ""
    found = [k for k, _ in module.named_buffers() if k.rpartition(".")[2] in ("running_mean", "running_var")]
    if not found:
        return ""
    owners = ", ".join(f"`{m}`" for m in dict.fromkeys(k.rpartition(".")[0] for k in found))
    return (
        f"the running statistics of {owners} are not compared: the check ran in eval mode, where they are "
        "inputs (a training-mode bug such as a momentum in the other library's convention is not seen: "
        "put the PyTorch module in `.train()` and call the JAX model in training mode to check it)"
    )


def _torch(prepared: Prepared, params: dict, inputs: dict, paired: Paired) -> dict[str, np.ndarray]:
    from crosscheck._workloads.port.sides import torch_training

    state = {**params, **prepared.torch_state(inputs)}
    got = torch_training.running(prepared.torch_side, state, prepared.user_inputs(inputs))
    if prepared.conversion is None:
        return got
    leaves = running_convert.converted(prepared, state, got, _dtype(params) == np.float64)
    return running_convert.gathered(leaves, paired)


def _jax(prepared: Prepared, params: dict, inputs: dict, paired: Paired) -> dict[str, np.ndarray]:
    import jax

    from crosscheck._workloads.port.declare.build import jax_leaves, jax_side_inputs
    from crosscheck._workloads.port.mapping import assemble
    from crosscheck._workloads.port.sides.jax_side import to_jax

    dtype = _dtype(params)
    with jax.enable_x64(dtype == np.float64):
        arrays = to_jax(inputs)
        leaves = jax_leaves(prepared, to_jax(params), arrays)
        given = jax_side_inputs(prepared.port, prepared.user_inputs(arrays))
        after = prepared.jax_side.updated(leaves, given, dtype)
        if prepared.conversion is not None:
            return running_convert.gathered(after, paired)
        shapes = {k: prepared.values[k].shape for k in paired}
        return {k: np.asarray(v) for k, v in assemble.back(prepared.pieces(), after, shapes).items()}


def _dtype(params: dict) -> np.dtype:
    """The case's floating dtype, as its parameters hold it (a 16-bit one included)."""
    return np.asarray(next(iter(params.values()))).dtype


def compared(prepared: Prepared, point: Point, name: str, call: Call) -> tuple[list[Comparison], str]:
    """The rows of the running statistics (``[]`` in eval mode or with none) and the verdict's clause;
    a comparison that could not be made is a failing row, and said."""
    names = statistics(prepared)
    if not names:
        return [], ""
    paired: Paired = {k: [] for k in names}
    why = ""
    if prepared.conversion is not None:
        paired, why = running_convert.positions(prepared, names)
    got: dict[tuple[str, str], dict] = {}
    other = OTHER_DTYPE[point.dtype]
    for dtype in (point.dtype, other) if not why else ():
        params, inputs = as_dtype(point.params, dtype), as_dtype(point.inputs, dtype)
        for side, out in (
            ("torch", call(_torch, prepared, params, inputs, paired)),
            ("jax", call(_jax, prepared, params, inputs, paired)),
        ):
            why = why or (f"the {side} side's training-mode call failed: {out.error}" if out.error else "")
            got[(side, dtype)] = out.value
    if why:
        text = f"the running statistics were not compared: {why}"
        return [_failed(name, text)], text
    rows = [_row(k, got, point.dtype, other, name) for k in names]
    bad = next((r for r in rows if not r.passed), None)
    if bad is None:
        modules = ", ".join(f"`{m}`" for m in dict.fromkeys(k.rpartition(".")[0] for k in names))
        return rows, f"the running statistics of {modules} agree after a training-mode forward"
    where = str(bad.parameter).removesuffix(f" {ROW}")
    return rows, (
        f"the running statistics differ first at `{where.rpartition('.')[0]}` (`{where}`, after one "
        "training-mode forward pass from the case's): the update of the running statistics differs (its "
        "momentum and its convention, the variance's Bessel correction)"
    )


def origin(rows: list[Comparison], text: str) -> Origin:
    """The port's verdict (``text``) where its running statistics differ and every module's output and
    gradient agree: it starts in the running statistics, at the module of the first that differs
    (``bn`` for ``bn.running_mean``); a comparison that could not be made names none, where it starts
    is ``"unknown"``."""
    bad = next(r for r in rows if not r.passed)
    if bad.parameter == ROW:  # not compared (``_failed``): no statistic to name
        return Origin("unknown", None, None, (), text)
    module = str(bad.parameter).removesuffix(f" {ROW}").rpartition(".")[0]
    return Origin(STARTS_IN, module, module, (), text)


def _row(k: str, got: dict, dtype: str, other: str, name: str) -> Comparison:
    """One running statistic of the port against PyTorch's, within both sides' measured rounding."""
    main, wide = (
        np.asarray(got[("torch", dtype)][k], np.float64),
        np.asarray(got[("torch", other)][k], np.float64),
    )
    # the port's statistic as the case's dtype stores it (a 16-bit one rounded once): its rounding too
    stored = np.asarray(got[("jax", dtype)].get(k, np.full(main.shape, np.nan))).astype(numpy_dtype(dtype))
    mine = stored.astype(np.float64)
    again = np.asarray(got[("jax", other)].get(k, np.full(main.shape, np.nan)), np.float64)
    # a float64 check measures with its float32 re-run, scaled to float64's unit roundoff
    scale = 1.0 if dtype != "float64" else UNIT_ROUNDOFF["float64"] / UNIT_ROUNDOFF["float32"]
    terms = {
        "rounding": _terms.measured(scale * np.abs(np.nan_to_num(mine - again))),
        "reference": _terms.measured(scale * np.abs(main - wide)),
        "floor": np.broadcast_to(_terms.floor(_terms.largest(main), unit_roundoff(dtype)), main.shape),
    }
    return compare(
        stored,
        main,
        Tolerance(terms),
        backend=name,
        reference_name="torch",
        dtype=dtype,
        parameter=f"{k} {ROW}",
        term_help=TERM_HELP,
    )


def _failed(name: str, text: str) -> Comparison:
    return Comparison(
        backend=name, reference="torch", passed=False, status="invalid", total=1, parameter=ROW, message=text
    )
