"""Where a port differs: each module's output compared within its measured rounding, then the verdict.

The PyTorch side's module calls (forward hooks) and the JAX side's (Flax ``intercept_methods``) are
paired through the parameter mapping (the module that owns a mapped parameter) and by name (modules
without parameters: dropout, activations); user-listed intermediates (``jax_intermediates``) carry
PyTorch's names and pair as named, without their inputs (``listed_origin``). Each pair's output is
compared entry by entry; its tolerance is the sum of both sides' rounding, *measured* by re-running each
side in the other precision (``SAFETY`` x (the difference + its RMS), scaled by ``2**-29`` for a float64
case; capped entry by entry at what float32 permits, ``_compare.terms.capped``, a 16-bit dtype's re-run
by its typical entry, ``cap``), plus a floor of ``FLOOR_ULPS`` unit roundoffs of the largest entry
(``_compare.terms`` builds each). Each array is read in PyTorch's layout, proven by the values where
the shapes allow several (``declare.layout.read``: an NHWC image, a square ``(B, H*W, C)``). Outputs
whose shapes broadcast one into the other (a ``(1, S, H)``
position embedding against a ``(B, S, H)`` one) are compared after broadcasting, and the row and the
verdict say so. A side whose re-run failed takes the other side's measured rounding for both; with
neither, the output is "not judged" (``NOT_JUDGED``: it fails, and the verdict blames no module for it).
A side whose re-run differs beyond what float32 permits in many entries (``terms.Redrawn``: a random
draw made again, a dropout left on) did not re-round the same computation: the output fails, said as
such (``REDRAWN``).

The verdict (where the difference starts, from these comparisons) is ``verdict.py``'s.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from crosscheck._compare import terms as _terms
from crosscheck._compare import whole
from crosscheck._compare.compare import compare
from crosscheck._compare.constants import OTHER_DTYPE
from crosscheck._compare.device import Arithmetic
from crosscheck._compare.dtypes import is_low, numpy_dtype, unit_roundoff
from crosscheck._compare.message import mismatch_message
from crosscheck._compare.record import Comparison, Tolerance
from crosscheck._workloads.model.rounding import LOST_BITS
from crosscheck._workloads.port.declare import layout
from crosscheck._workloads.port.mapping.matching import canonical

TERM_HELP = {
    "rounding": _terms.measured_help(
        "the JAX port's own rounding of this output",
        "|its output - its re-run in the other precision| (x 2**-29 for float64)",
        "that difference's RMS",
    ),
    "reference": "the PyTorch module's own rounding of this output, measured the same way",
    "floor": _terms.floor_help("the output's largest entry"),
}


#: The coverage of a module output that no side's measured rounding could judge.
NOT_JUDGED = "not judged"


@dataclasses.dataclass(frozen=True)
class Runs:
    """One side's module records: at the case's dtype and re-run in the other."""

    main: Sequence[Any]
    other: Sequence[Any]
    #: Why ``other`` is empty: the re-run in the other precision failed (``""``: it did not).
    problem: str = ""
    #: Where the re-run was made, when not where the side runs, and why (``capture.home``).
    home: str = ""


def pairs(torch_names: Sequence[str], jax_names: Sequence[str], modules: dict[str, str]) -> dict[str, str]:
    """PyTorch record name -> JAX record name: through ``modules`` (PyTorch module -> JAX module, from
    the mapping), else by canonical name; a second call ``name#2`` pairs with ``name#2``, a stacked
    layer's ``layers.2.linear#2`` with the second call in the scan's step of index 2,
    ``layers.linear@2#2`` (``steps.label``). A JAX module called in a scan's steps once each is also
    its ``k``-th call by name (``cell@2`` as ``cell#3``: a cell PyTorch calls in a loop), and a stacked
    layer met in no scan (a Python loop over the slices) its ``i + 1``-th call."""
    by_canonical = {_by_name(n): n for n in jax_names}
    by_canonical.update({_by_name(_ordinal(n)): n for n in jax_names if "@" in n and "#" not in n})
    jax_set = set(jax_names)
    out = {}
    for name in torch_names:
        base, _, call = name.partition("#")
        target = modules.get(base)
        found = (target + (f"#{call}" if call else "")) if target is not None else None
        if found not in jax_set and target is not None and "@" in target and not call:
            found = _ordinal(target)
        if found not in jax_set:
            found = (
                by_canonical.get(canonical(base.split(".")) + (call,))
                if base
                else ("" if "" in jax_set else None)
            )
        if found is not None:
            out[name] = found
    return out


def _by_name(name: str) -> tuple[str, ...]:
    """A record name's key for pairing by name: its module's canonical path and its call."""
    return (*canonical(name.split("#")[0].split(".")), name.partition("#")[2])


def _ordinal(name: str) -> str:
    """A scan step's record ``name@i`` as the ``i + 1``-th call of ``name`` (``name``, ``name#2``, ...)."""
    base, _, step = name.partition("@")
    k = int(step.split(".")[0]) + 1
    return base if k == 1 else f"{base}#{k}"


def _broadcast(t: np.ndarray, j: np.ndarray, channels_last: bool) -> tuple[np.ndarray, np.ndarray] | None:
    """Both arrays at their common shape where one broadcasts to the other's (PyTorch's ``(1, S, H)``
    position embedding against Flax's ``(B, S, H)``: the same values wherever they are used); None
    where neither does (``(B, 1)`` against ``(B,)`` would make ``(B, B)``: no broadcast equivalence)."""
    moved = np.moveaxis(j, -1, 1) if j.ndim >= 3 else j
    for a in (moved, j) if channels_last else (j, moved):
        try:
            shape = np.broadcast_shapes(t.shape, a.shape)
        except ValueError:
            continue
        if shape in (t.shape, a.shape):
            return np.broadcast_to(t, shape), np.broadcast_to(a, shape)
    return None


def _vector(
    torch_arrays, jax_arrays, channels_last: bool, reads: list | None = None, memo: dict | None = None
) -> tuple[np.ndarray, np.ndarray, str, list] | str:
    """Both sides' arrays, each pair in PyTorch's layout (``reads``: each pair's layout, else found by
    ``layout.read``), flattened and joined; a note where a pair was compared after broadcasting; and the
    layouts read (or the one-line reason they cannot be compared)."""
    n = min(len(torch_arrays), len(jax_arrays))
    if n == 0:
        return "no arrays to compare"
    t_parts, j_parts, notes, used = [], [], [], []
    for k in range(n):
        t, j = np.asarray(torch_arrays[k]), np.asarray(jax_arrays[k])
        read = reads[k] if reads is not None else layout.read(t, j, k, {} if memo is None else memo)
        used.append(read)
        if isinstance(read, str):
            return read
        if read is not None and read.shape == t.shape:
            converted = read.to_torch(j)
        else:  # as it is where the shapes are PyTorch's (the model output's, found as it is)
            converted = j if j.shape == t.shape else None
        if converted is None:
            both = _broadcast(t, j, channels_last)
            if both is None:
                return f"array {k}: PyTorch shape {t.shape}, JAX shape {j.shape}"
            notes.append(
                f"array {k}: PyTorch's {t.shape} and JAX's {j.shape} compared broadcast to {both[0].shape}"
            )
            t, converted = both
        # in float64, as views where they are already: read only from here on
        t_parts.append(np.asarray(t, np.float64).ravel())
        j_parts.append(np.asarray(converted, np.float64).ravel())
    return _joined(t_parts), _joined(j_parts), "; ".join(notes), used


def _joined(parts: list[np.ndarray]) -> np.ndarray:
    """The arrays flattened one after the other (one array: itself, not a copy)."""
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def _rounding(
    main: np.ndarray, other: np.ndarray | None, dtype: str, device: Arithmetic | None = None
) -> tuple[np.ndarray, _terms.Redrawn | None]:
    """A side's measured rounding of one output, capped at what its dtype permits (on the ``device``
    it ran on: its arithmetic too), and whether its re-run was another computation (``terms.Redrawn``;
    float32 and float64 cases)."""
    if other is None or other.shape != main.shape:
        return np.full(main.shape, 1024 * unit_roundoff(dtype)) * np.abs(main), None
    scale = _terms.widening(dtype)
    with np.errstate(invalid="ignore"):  # |main - other|, NaN and +inf as 0, made in one array
        d = np.subtract(main, other)
        np.abs(d, out=d)
    if not whole.finite(d):  # a pass of its own only where there is a NaN or an infinity
        np.nan_to_num(d, copy=False, nan=0.0, posinf=0.0)
    wide = main if dtype == "float64" else other
    if is_low(dtype):  # a 16-bit dtype's permit, against float32, judged by the typical entry
        d, _ = _terms.cap(d, wide, dtype=_terms.permit_dtype(dtype))
        return _terms.measured(scale * d), None
    # float32's permit, entry by entry: no entry of a re-run sets its own tolerance
    d, redrawn = _terms.capped(d, wide, device=device)
    if scale != 1.0:  # the same numbers as ``scale * d``, in the capped array (its own)
        d *= scale
    return _terms.measured(d, own=True), redrawn


#: What a comparison's message starts with when a side's re-run was not the same computation.
REDRAWN = "is not the same computation"


def _redrawn_text(label: str, side: str, dtype: str, redrawn: _terms.Redrawn, on: str = "") -> str:
    head = (
        f"{label}: the {OTHER_DTYPE[dtype]} re-run of `{side}` {REDRAWN}: {redrawn.entries} of "
        f"{redrawn.total} entries differ from its {dtype} run by more than {redrawn.dtype} rounding{on} "
        f"permits (up to {redrawn.ratio:.3g} x)"
    )
    if on:  # on an accelerator, its arithmetic may outgrow its model: the re-runs at `highest` and on
        # the host CPU say which (``_engine/classify``), not a guess here
        return (
            f"{head}: the device's reduced-precision arithmetic compounded beyond its model, or another "
            f"computation (a random draw made again); the check re-runs `{side}`'s side at its most "
            "precise arithmetic and on the host CPU to say which, and this output fails here"
        )
    return (
        f"{head}, which no re-rounding of a well-conditioned computation does: a random draw made again "
        "(random? a dropout left on, a key drawn in the default float dtype), or a float32 computation "
        f"that loses bits ({LOST_BITS}); no rounding can be measured from such a re-run, and this "
        "output fails"
    )


def compare_arrays(
    label: str,
    torch_runs: tuple[Sequence, Sequence],
    jax_runs: tuple[Sequence, Sequence],
    *,
    dtype: str,
    channels_last: bool,
    backend: str,
    reference: str,
    missing: str = "",
    precision: str | None = None,
    device: Arithmetic | None = None,
    reference_device: Arithmetic | None = None,
    keep: bool = False,
    module: str | None = None,
    memo: dict | None = None,
) -> Comparison:
    """One module's output (or input): the JAX port's against PyTorch's, within both measured roundings
    (those of ``precision``, the case's dtype unless given: ``"float32"`` in a float64 case whose losses
    have float32 steps, where the re-run's difference is float32's rounding, not float64's). ``device``:
    where the JAX side computed, when on an accelerator: its re-run's difference is permitted that
    device's arithmetic (``device.Arithmetic``), never called another computation for it;
    ``reference_device`` the same of the PyTorch side (its TF32 products and cuDNN convolutions on a GPU,
    as its placement ran them).

    A side without a re-run in the other precision (``missing`` says why) takes the other side's
    measured rounding (the same function at the same precision), said in the tolerance's sources;
    with neither, the output is not judged (``unjudgeable``, nothing compared), never passed.
    ``module``: the module whose output this is, said in the messages (a module output, not a
    parameter). Each array is read in PyTorch's layout (``layout.read``: proven by the values, ``memo``
    keeping what was proven, by the two shapes); where no layout can be told, the output is not judged."""
    main = _vector(torch_runs[0], jax_runs[0], channels_last, memo=memo)
    if isinstance(main, str):
        status = "unjudgeable" if "cannot be told" in main else "mismatch"
        found = _failed(label, f"{label}: {main}", backend=backend, reference=reference, status=status)
        return dataclasses.replace(found, coverage=NOT_JUDGED) if status == "unjudgeable" else found
    t, j, broadcast, reads = main
    t_miss, j_miss = not torch_runs[1], not jax_runs[1]
    if t_miss and j_miss:
        why = missing or "neither side's module ran in the re-run"
        text = (
            f"{label}: not judged: neither side's rounding could be measured in {OTHER_DTYPE[dtype]} ({why})"
        )
        found = _failed(label, text, backend=backend, reference=reference, status="unjudgeable")
        return dataclasses.replace(found, coverage=NOT_JUDGED)
    other = _vector(torch_runs[1] or torch_runs[0], jax_runs[1] or jax_runs[0], channels_last, reads)
    t_other, j_other = (None, None) if isinstance(other, str) else other[:2]
    precision = precision or dtype
    on, t_on = (
        f" on {d.words()}" if d is not None and d.unit is not None else "" for d in (device, reference_device)
    )
    terms: dict[str, np.ndarray] = {}
    # a side without a re-run takes the other's measured rounding (below): its own is not measured
    for key, side, main_, again, missed, where, unit in (
        ("rounding", backend, j, j_other, j_miss, on, device),
        ("reference", reference, t, t_other, t_miss, t_on, reference_device),
    ):
        if missed:
            continue
        terms[key], redrawn = _rounding(main_, again, precision, unit)
        if redrawn is not None:
            text = _redrawn_text(label, side, dtype, redrawn, where)
            return _failed(label, text, backend=backend, reference=reference)
    terms, helps = _shared(terms, t_miss, j_miss, missing)
    terms["floor"] = np.asarray(_terms.floor(_terms.largest(t), unit_roundoff(precision)))
    found = compare(
        j.astype(numpy_dtype(dtype)),
        t,
        Tolerance(terms),
        backend=backend,
        reference_name=reference,
        dtype=dtype,
        parameter=label,
        term_help=helps,
        keep=keep,
    )
    if module is not None:  # a module's output, said as such (never "parameter")
        found = dataclasses.replace(found, module=module)
        found = dataclasses.replace(found, message=mismatch_message(found))
    if found.status == "unjudgeable" and not np.any(t) and not np.any(j):
        found = dataclasses.replace(found, passed=True, status="ok", message="")  # exact zeros agree
    if broadcast:  # said in the row's coverage and message: not every entry is the other side's own
        message = f"{label}: every entry, after broadcasting ({broadcast})"
        found = dataclasses.replace(
            found,
            coverage=f"every entry, after broadcasting ({broadcast})",
            message=f"{message}\n{found.message}" if not found.passed else message,
        )
    return found


def _shared(
    terms: dict[str, np.ndarray], t_miss: bool, j_miss: bool, missing: str
) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """The rounding terms and their help: where a side was not re-run, the side that ran twice
    measures the rounding of both (``terms`` holds its alone), and the help says so."""
    helps = dict(TERM_HELP)
    if not (t_miss or j_miss):
        return terms, helps
    gone, kept, side = ("reference", "rounding", "PyTorch") if t_miss else ("rounding", "reference", "JAX")
    helps[gone] = (
        f"the {side} side's rounding could not be measured ({missing or 'no re-run'}): the other side's, "
        "measured"
    )
    return {"rounding": terms[kept], "reference": terms[kept]}, helps


def outcome(c: Comparison) -> bool | None:
    """Whether a module comparison agrees; None where it judged nothing (``NOT_JUDGED``): neither
    agreement nor a difference the verdict may blame."""
    return None if c.coverage == NOT_JUDGED else c.passed


def _failed(label: str, text: str, *, backend: str, reference: str, status: str = "mismatch") -> Comparison:
    """A module comparison that found a difference (``mismatch``) or judged nothing (``unjudgeable``)."""
    judged = int(status == "mismatch")
    return Comparison(
        backend=backend,
        reference=reference,
        passed=False,
        status=status,
        total=1,
        mismatched=judged,
        judged=judged,
        unjudgeable=1 - judged,
        parameter=label,
        message=text,
    )


def shape_note(torch_top: Any, jax_top: Any, channels_last: bool) -> str:
    """The verdict's note when the port's output has another shape than the original's (no layout whose
    values fit nor broadcast relates them: a wrong input layout, most often); "" otherwise."""
    if torch_top is None or jax_top is None or not torch_top.outputs or not jax_top.outputs:
        return ""
    t, j = np.asarray(torch_top.outputs[0]), np.asarray(jax_top.outputs[0])
    near = any(  # a layout the values fit, roughly: no question of the inputs' layout
        np.linalg.norm(read.to_torch(j) - t) <= layout.NEARER * np.linalg.norm(t)
        for read in layout.candidates(j.shape, t.shape)
    )
    if (t.shape == j.shape or near) or _broadcast(t, j, channels_last) is not None:
        return ""
    return (
        f"; the port's output has shape {j.shape}, the original's {t.shape}: are the JAX side's inputs in "
        f"the layout it expects? (`jax_inputs` converts them, e.g. `x.transpose(0, 2, 3, 1)` for NHWC)"
    )


def output_label(name: str) -> str:
    return f"{name or '(model)'} (output)"
