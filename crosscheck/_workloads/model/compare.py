"""A candidate's gradient against one answer of the oracle (or a reference backend), per parameter.

The tolerance of an entry is a sum of named terms (see ``docs/explanations/model-oracle.md``), each
built by ``crosscheck._compare.terms``:

- ``rounding``: the candidate's own rounding, measured (``rounding.measure``);
- ``reference``: the oracle's error bar (or, for another backend as reference, its rounding term);
- ``floor``: ``FLOOR_ULPS`` unit roundoffs of the parameter's largest reference entry; in a float64
  case, where both values lie within float64 rounding of the gradient's scale, twice that rounding
  (``terms.saturated``: the float32 re-run that measures a float64 rounding saturates first);
- ``slack``: the user's ``atol + rtol * |reference|``.

Along a direction ``v`` (screening) each term is projected: the measured rounding as
``SAFETY * (|delta . v| + |delta o v|_2)`` (its own signed projection plus its random-sign scale), the
floor and a conservative rounding bound in quadrature, the slack as ``sum((atol + rtol |g|) |v|)``.

Each comparison also says whether a gradient of zeros would have passed it (``zero_passes``): when that
holds for every parameter, the check is empty (the loss's gradient is at rounding level).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from crosscheck._compare import screening, whole
from crosscheck._compare import terms as _terms
from crosscheck._compare.compare import compare
from crosscheck._compare.dtypes import unit_roundoff
from crosscheck._compare.record import Comparison, Kinks, Made, Tolerance
from crosscheck._workloads.model.measured import Bound, made
from crosscheck._workloads.model.oracle.directions import (
    Direction,
    DirectionalEstimate,
    project,
    project_quadrature,
)
from crosscheck._workloads.model.rounding import Rounding
from crosscheck._workloads.protocol import Options

TERM_HELP = {
    "rounding": _terms.measured_help(
        "the candidate's own rounding",
        "|its gradient - its re-run in the other precision| (x 2**-29 for float64)",
        "that difference's RMS over the parameter",
    ),
    "reference": "the reference's own error (the oracle's finite-difference error bar, or its rounding)",
    "floor": _terms.floor_help(
        "the parameter's largest reference entry",
        then=(
            "; in a float64 case, where both values lie within float64 rounding of the gradient's scale "
            f"({_terms.PERMIT_ULPS:g} u x (|reference| + its RMS + the whole gradient's RMS)), twice that: "
            "not a difference (a float32 re-run, saturated first, cannot measure it)"
        ),
    ),
    **_terms.TERM_HELP,  # slack
}


@dataclasses.dataclass(frozen=True)
class Answer:
    """What a candidate is compared with, per parameter: value, error bar, and what cannot be judged."""

    value: Mapping[str, np.ndarray]
    error: Mapping[str, np.ndarray]
    kinks: dict[str, Kinks]


@dataclasses.dataclass(frozen=True)
class Context:
    """What every comparison of one candidate shares."""

    name: str
    reference: str
    question: str
    against: str
    dtype: str
    options: Options
    shapes: Mapping[str, tuple[int, ...]]


def invalid(ctx: Context, k: str, message: str) -> Comparison:
    """Parameter ``k`` not checked, and failed: ``message`` says why."""
    return Comparison(
        backend=ctx.name,
        reference=ctx.reference,
        parameter=k,
        passed=False,
        status="invalid",
        total=math.prod(ctx.shapes[k]),
        message=message,
        question=ctx.question,
        against=ctx.against,
    )


def missing(ctx: Context, k: str, value: dict) -> Comparison:
    returned = ", ".join(value) or "nothing"
    return invalid(
        ctx, k, f"parameter `{k}`: missing from the gradients `{ctx.name}` returned (it returned: {returned})"
    )


def entries(
    ctx: Context, value: dict[str, np.ndarray], rounding: Rounding, answer: Answer, coverage: dict[str, str]
) -> tuple[list[Comparison], dict[str, bool]]:
    """One comparison per parameter, entry by entry, and whether zeros would pass each."""
    out, zeros = [], {}
    u = unit_roundoff(ctx.dtype)
    every = _whole_rms(answer.value, ctx.shapes) if ctx.dtype == "float64" else 0.0  # saturated's only
    for k, shape in ctx.shapes.items():
        if k not in value:
            out.append(missing(ctx, k, value))
            continue
        ref = _reference(answer.value[k])
        # each made a block at a time where it is read (``measured.made``), else as it is kept
        term, error = made(rounding.term, k), made(answer.error, k)
        floor = np.asarray(_terms.floor(_terms.largest(ref), u))
        if ctx.dtype == "float64" and np.shape(value[k]) == shape:  # float32's re-run saturates first
            floor = np.maximum(floor, _terms.saturated(value[k], ref, every, "float64"))
        terms = {
            "rounding": term,
            "reference": error,
            "floor": floor,
            "slack": np.broadcast_to(ctx.options.slack_at(ref), shape),
        }
        found = compare(
            value[k],
            ref,
            Tolerance(terms),
            backend=ctx.name,
            reference_name=ctx.reference,
            dtype=ctx.dtype,
            kinks=answer.kinks[k],
            strict=ctx.options.strict,
            keep=ctx.options.plot,
            parameter=k,
            term_help=TERM_HELP,
        )
        zeros[k] = _zeros_pass(ref, term, error, floor, answer.kinks[k].unjudgeable)
        arrays = {**found.arrays, "rounding": {k: Bound(rounding.term, k, floor)}}  # made when read
        found = dataclasses.replace(found, arrays=arrays, question=ctx.question, against=ctx.against)
        if not found.passed and k in rounding.limits:  # a 16-bit range lost: said as what it is
            found = dataclasses.replace(found, message=f"{found.message} ({rounding.limits[k]})")
        if k in coverage:
            message = f"{coverage[k]}\n{found.message}" if found.message else found.message
            found = dataclasses.replace(found, coverage=coverage[k], message=message)
        out.append(found)
    return out, zeros


def _reference(value: Any) -> np.ndarray:
    """A reference gradient as the comparison reads it: a float32 or float64 array as it is (every
    use widens it exactly, an entry or a block at a time: ``compare``'s blocks, ``terms.largest``,
    ``_zeros_pass``), anything else widened to float64 (a float64 copy of the token
    embedding's gradient was 0.29 GiB of GPT-2 small's peak)."""
    ref = np.asarray(value)
    return ref if ref.dtype in (np.float32, np.float64) else ref.astype(np.float64)


#: Entries ``_zeros_pass`` takes at once (its temporaries: a few of this size, not of the tensor's).
ZEROS_CHUNK = 1 << 18


def _zeros_pass(ref: np.ndarray, term: Any, error: Any, floor: Any, unjudgeable: Any) -> bool:
    """Whether zeros would pass: every judged ``|ref|`` within ``term + error + floor`` (summed in that
    order: the numbers of the whole tensor's sum), a block of rows of about ``ZEROS_CHUNK`` entries at
    a time (the sum, a copy of the judged entries and their magnitudes were four temporaries
    of the tensor's size)."""
    shape = ref.shape
    lead = shape or (1,)
    step = max(1, ZEROS_CHUNK // max(math.prod(lead[1:]), 1))
    r, f, u = (np.broadcast_to(x, shape).reshape(lead) for x in (ref, floor, unjudgeable))
    t, e = (x if isinstance(x, Made) else np.broadcast_to(x, shape).reshape(lead) for x in (term, error))
    for a in range(0, lead[0], step):
        rows = slice(a, a + step)
        judged = ~u[rows]
        bound = _rows(t, rows) + _rows(e, rows) + f[rows]
        if not np.all(np.abs(r[rows][judged]) <= bound[judged]):
            return False
    return True


def _rows(x: Any, rows: slice) -> np.ndarray:
    return x.rows(rows) if isinstance(x, Made) else x[rows]


def directions(
    ctx: Context,
    value: dict[str, np.ndarray],
    rounding: Rounding,
    est: DirectionalEstimate,
    dirs: list[Direction],
    floors: dict[str, np.ndarray] | None = None,
) -> tuple[dict[str, dict], dict[str, bool]]:
    """Per parameter, the candidate along its directions: ``{k: row}`` and whether zeros would pass
    (``floors``: the floor per entry, when not each parameter's own: a group of tensors as one).

    A row: ``index`` (the directions of ``k``), ``projected``, ``reference``, ``terms``, ``failing``.
    """
    projected = project({k: v for k, v in value.items() if k in ctx.shapes}, dirs)
    terms = projected_terms(ctx, value, rounding, dirs, floors)
    terms["reference"] = est.error
    tol = terms["rounding"] + terms["reference"] + terms["floor"] + terms["slack"]
    bound = tol - terms["slack"]
    rows, zeros = {}, {}
    for k in ctx.shapes:
        index = np.array([i for i, d in enumerate(dirs) if d.parameter == k], dtype=int)
        judged = ~est.unjudgeable[index]
        diff = np.abs(projected[index] - est.value[index])
        failing = screening.failing(diff, tol[index], judged)
        zeros[k] = bool(np.all(np.abs(est.value[index][judged]) <= bound[index][judged]))
        rows[k] = {
            "index": index,
            "diff": diff,
            "tol": tol[index],
            "failing": failing,
            "judged": judged,
            "terms": {n: t[index] for n, t in terms.items()},
            "projected": projected[index],
        }
    return rows, zeros


def projected_terms(
    ctx: Context, value: dict, rounding: Rounding, dirs: list[Direction], floors: dict | None = None
) -> dict[str, np.ndarray]:
    """The tolerance's terms along every direction (``reference`` left to the caller: 0 here)."""
    if rounding.delta is not None:
        signed = _per_parameter(project, rounding.delta, dirs)
        scale = _per_parameter(project_quadrature, rounding.delta, dirs)
        round_term = _terms.measured(np.abs(signed), scale)
    else:
        round_term = _per_parameter(project_quadrature, rounding.term, dirs)
    if floors is None:
        floors = {k: floor_of(value[k], ctx.dtype) for k in ctx.shapes}
    floor = project_quadrature({k: _array(f) for k, f in floors.items()}, dirs)
    slack = np.zeros(len(dirs))
    if ctx.options.slack is not None:
        for i, d in enumerate(dirs):
            per_entry = ctx.options.slack_at(np.asarray(value[d.parameter], np.float64))
            slack[i] = float(np.sum(per_entry * np.asarray(d.step)))
    return {"rounding": round_term, "reference": np.zeros(len(dirs)), "floor": floor, "slack": slack}


def _array(x: object) -> object:
    """``x`` as an array, or as it is where it is read a block at a time (a group's ``Joint``)."""
    return x if hasattr(x, "block") else np.asarray(x)


def _per_parameter(along: Any, arrays: Mapping[str, np.ndarray], dirs: list[Direction]) -> np.ndarray:
    """``along(arrays, dirs)`` (``project``, ``project_quadrature``) with each parameter's array read once:
    a measured term or a rescaled difference is made when read (``measured.Measured``), a block at a
    time (its ``Made``: ``oracle.sums``), never whole."""
    out = np.zeros(len(dirs))
    for k in dict.fromkeys(d.parameter for d in dirs):
        index = [i for i, d in enumerate(dirs) if d.parameter == k]
        out[index] = along({k: made(arrays, k)}, [dirs[i] for i in index])
    return out


def _whole_rms(value: Mapping[str, np.ndarray], shapes: Mapping[str, tuple[int, ...]]) -> float:
    """The RMS of a whole gradient (every parameter's entries): the scale shared by its arrays."""
    return whole.rms([value[k] for k in shapes if k in value])  # bit for bit the concatenation's


def _why(reasons: Mapping[str, int]) -> str:
    """Why directions were unjudgeable, as the entries' message says it (`` (3 <reason>)``), or ""."""
    said = ", ".join(f"{n} {r}" if r else f"{n} without a reason recorded" for r, n in reasons.items())
    return f" ({said})" if said else ""


def floor_of(value: np.ndarray, dtype: str) -> float:
    """The floor of a parameter: ``FLOOR_ULPS`` unit roundoffs of its largest entry."""
    return _terms.floor(_terms.largest(value), unit_roundoff(dtype))


def screened(
    ctx: Context,
    k: str,
    row: dict,
    est: DirectionalEstimate,
    value: np.ndarray,
    coverage: str,
    note: str = "",
) -> Comparison:
    """The comparison of parameter ``k`` along its directions only."""
    found = screening.Directions.of(row)
    n, judged = len(row["index"]), found.judged
    bad, unjudgeable = found.mismatched, found.unjudgeable
    reasons = est.reason[row["index"]][~judged]
    record: dict[str, Any] = {
        "backend": ctx.name,
        "reference": ctx.reference,
        "parameter": k,
        "total": int(np.size(value)),
        "mismatched": bad,
        "judged": 0,
        "unjudgeable": 0,
        "coverage": coverage,
        "question": ctx.question,
        "against": ctx.against,
        "unjudgeable_reasons": {
            str(r): int(c) for r, c in zip(*np.unique(reasons, return_counts=True), strict=True)
        }
        if unjudgeable
        else {},
    }
    why = _why(record["unjudgeable_reasons"])
    if not np.any(judged):
        message = f"{coverage}: every direction is unjudgeable{why}: nothing was compared!"
        return Comparison(passed=False, status="unjudgeable", message=message, **record)
    ratio, worst = found.ratio, found.worst
    terms = {name: float(t[worst]) for name, t in row["terms"].items()}
    shown = " + ".join(f"{name} {v:.3g}" for name, v in terms.items())
    verdict = f"{bad} of {n} directions disagree" if bad else screening.AGREES
    if unjudgeable:
        verdict += f", {unjudgeable} unjudgeable{why}"
    message = (
        f"{coverage}: {verdict}; worst direction {worst} of `{k}`: {ctx.name} {row['projected'][worst]:.9g} "
        f"vs {ctx.reference} {est.value[row['index'][worst]]:.9g}, difference {ratio[worst]:.3g} x the "
        f"tolerance {float(row['tol'][worst]):.3g} = {shown}; decided by {max(terms, key=lambda n: terms[n])}"
    )
    if bad and note:
        message += f" ({note})"
    passed = bad == 0
    return Comparison(
        passed=passed,
        status="ok" if passed else "mismatch",
        message=message,
        worst_ratio=float(ratio[worst]),
        worst_terms=terms,
        decided_by=max(terms, key=lambda n: terms[n]),
        tolerance_sources=dict(TERM_HELP),
        **record,
    )
