"""Localizing a disagreement: where the forward pass diverges, where the backward pass does; and the
report's section that says so, layer by layer (``SECTION``, handed to the report by the judge)."""

from __future__ import annotations

from typing import Any

import numpy as np

from crosscheck._compare import terms
from crosscheck._compare.constants import UNIT_ROUNDOFF
from crosscheck._compare.dtypes import accumulation
from crosscheck._compare.record import Comparison
from crosscheck._report.report import Report, Section
from crosscheck._report.text import markup, plain
from crosscheck._types import Console, Loaded
from crosscheck._workloads.stack import rounding
from crosscheck._workloads.stack.forward import Forward


def forward_layers(activations: Any, fwd: Forward, model: rounding.RoundingModel) -> list[dict[str, Any]]:
    """Compare a backend's activations ``y[1] .. y[L]`` with the float64 ones, layer by layer.

    Each activation's tolerance is the modelled rounding of its pre-activation (a flipped ReLU moves it by
    at most that much too) plus 8 unit roundoffs of the layer's largest activation.
    """
    activations = np.asarray(activations, dtype=np.float64)
    expected = (len(fwd.zs), *fwd.zs[0].shape)
    if activations.shape != expected:
        raise ValueError(f"activations must have shape {expected}; found {activations.shape}.")
    u = UNIT_ROUNDOFF[accumulation(model.dtype)]
    out = []
    for m, reference in enumerate(fwd.ys[1:]):
        tol = model.value_bound(m) + terms.floor(terms.largest(reference), u, ulps=terms.SAFETY_FLOOR_ULPS)
        diff = np.abs(activations[m] - reference)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(diff == 0, 0.0, diff / tol)
        out.append(
            {
                "layer": m,
                "max_abs_diff": float(np.nanmax(diff)),
                "worst_ratio": float(np.nanmax(ratio)),
                "mismatched": int(np.count_nonzero(~(diff <= tol))),
            }
        )
    return out


def verdict(forward: list[dict[str, Any]], per_layer: list[dict[str, Any]]) -> str:
    """One sentence: where the disagreement starts and in which pass."""
    bad_forward = [row["layer"] for row in forward if row["mismatched"]]
    bad_backward = [row["layer"] for row in per_layer if row["mismatched"]]
    if bad_forward:
        return (
            f"the forward pass diverges first at layer {bad_forward[0]} (its output y[{bad_forward[0] + 1}]"
            f" differs beyond rounding); gradients of layers {bad_backward or 'none'} differ"
        )
    if not bad_backward:
        return "every layer agrees, forward and backward"
    last = bad_backward[-1]
    where = (
        "the forward pass agrees at every layer: the defect is in the backward pass"
        if forward
        else ("no activations from this backend to compare")
    )
    return f"{where}; going back from the loss, the gradient first differs at layer {last}"


def classify(
    backend: Loaded,
    grad: Any,
    weights: np.ndarray,
    x: np.ndarray,
    first: np.ndarray,
    rerun,
    localized: str,
    nudged=None,
):
    """Re-run a mismatching candidate under controlled changes and state a verdict with the evidence.

    ``grad(weights, x)`` is the candidate's gradient (a guarded call that raises when the backend
    fails); ``rerun(value, dtype)`` compares a new gradient with the same reference and returns a
    Comparison.
    Checks, in order: a repeat (nondeterminism), the highest matmul precision (when the backend offers
    ``highest_precision()``, a context manager), checkpointing off (``without_checkpointing()``), float64
    arithmetic on the same values, and (``nudged``,
    a callable that re-runs the whole check on slightly moved weights) the same case away from kinks.
    """
    evidence = []
    repeats = [np.asarray(grad(weights, x)) for _ in range(2)]
    changed = [int(np.count_nonzero(r != first)) for r in repeats]
    if any(changed):
        evidence.append(f"two repeats differ from the first run in {max(changed)} entries")
        return {"verdict": "nondeterministic", "evidence": evidence}
    evidence.append("two repeats reproduce the first run bit for bit")
    explained = _in_contexts(backend, grad, weights, x, rerun, evidence)
    if explained:
        return {"verdict": explained, "evidence": evidence}
    if weights.dtype != np.float64:
        in64 = rerun(np.asarray(grad(weights.astype(np.float64), x.astype(np.float64))), "float64")
        if in64.passed:
            evidence.append("in float64 it agrees")
            return {
                "verdict": f"explained by {weights.dtype.name} arithmetic beyond its modelled rounding",
                "evidence": evidence,
            }
        evidence.append(f"in float64 it still mismatches ({in64.mismatched} entries)")
    if nudged is not None:
        if nudged(backend):
            evidence.append("with the weights nudged away from every ReLU kink it agrees")
            return {
                "verdict": "kink ambiguity: it differs only at (or very near) ReLU kinks, e.g. another "
                "derivative at exact zeros",
                "evidence": evidence,
            }
        evidence.append("with the weights nudged away from the ReLU kinks it still mismatches")
    return {"verdict": f"genuine: {localized}", "evidence": evidence}


#: The backend's optional contexts, what each changes, and the verdict when it makes the mismatch go.
_CONTEXTS = (
    ("highest_precision", "at the highest matmul precision", "explained by reduced matmul precision"),
    (
        "without_checkpointing",
        "without checkpointing",
        "explained by checkpointing: the recomputation differs",
    ),
)


def _in_contexts(
    backend: Loaded, grad: Any, weights: np.ndarray, x: np.ndarray, rerun, evidence: list
) -> str:
    """The verdict of the first context in which the candidate agrees ("" when none does)."""
    for method, condition, explanation in _CONTEXTS:
        context = getattr(backend, method, None)
        if not callable(context):
            continue
        with context():
            again = rerun(np.asarray(grad(weights, x)), weights.dtype.name)
        if again.passed:
            evidence.append(f"{condition} it agrees")
            return explanation
        evidence.append(f"{condition} it still mismatches ({again.mismatched} entries)")
    return ""


def render_explain(report: Report, console: Console) -> None:
    """Every comparison of ``report`` layer by layer (a ``rich`` console)."""
    for c in report.comparisons:
        _render_layers(c, console)


#: The report's section of ``explain``: after the table, the messages and the backends' failures.
SECTION = Section(render_explain, place="after")


def _render_layers(c: Comparison, console: Console) -> None:
    """Layer by layer: the forward activations and the gradient, each in units of its tolerance."""
    from rich.table import Table

    if not c.per_layer:
        return
    forward = {row["layer"]: row for row in c.forward if "layer" in row}
    t = Table(
        title=markup(f"{c.backend} vs {c.reference}, layer by layer (difference / tolerance)"),
        title_justify="left",
    )
    for column in (
        "layer",
        "forward y(k+1) worst",
        "forward mismatched",
        "gradient worst",
        "gradient mismatched",
    ):
        t.add_column(column, justify="right")
    for row in c.per_layer:
        f = forward.get(row["layer"])
        t.add_row(
            str(row["layer"]),
            f"{f['worst_ratio']:.3g}" if f else "-",
            str(f["mismatched"]) if f else "-",
            f"{row['worst_ratio']:.3g}",
            f"{row['mismatched']}/{row['judged']}",
        )
    console.print(t)
    console.print(f"verdict: {verdict(list(forward.values()), c.per_layer)}", highlight=False, markup=False)
    if c.classification:
        console.print(
            f"classification: {c.classification['verdict']} ("
            + "; ".join(c.classification["evidence"])
            + ")",
            highlight=False,
            markup=False,
        )
    _render_worst(c, console)


def _render_worst(c: Comparison, console: Console) -> None:
    """The worst entries, each with its tolerance's terms and the kink near it."""
    names = ", ".join(rounding.KINK_NAMES)
    for entry in c.worst_entries:
        terms = ", ".join(f"{k} {v:.3g}" for k, v in entry["terms"].items())
        kink = f"; ReLU kink nearby at ({names}) {tuple(entry['kink'])}" if entry["kink"] else ""
        console.print(
            f"  {tuple(entry['index'])}: {plain(c.backend)} {entry['candidate']:.9g} vs "
            f"{entry['reference']:.9g}, {entry['ratio']:.3g} x tolerance ({terms}){kink}",
            highlight=False,
            markup=False,
        )
