"""The verdict's notes on how a candidate's modules were compared: a side not re-run in the other
precision (``rerun_note``), outputs compared after broadcasting (``broadcast_note``), a re-run that was
another computation (``redrawn_note``); each "" when there is nothing to say, else "; " and its words,
for the verdict to append."""

from __future__ import annotations

from collections.abc import Sequence

from crosscheck._compare.record import Comparison
from crosscheck._workloads.port.judge.localize import REDRAWN, Runs


def rerun_note(torch_runs: Runs, jax_runs: Runs) -> str:
    """The verdict's note on a side that could not be re-run in the other precision ("" when none)."""
    homes = "".join(f"; {r.home}" for r in (torch_runs, jax_runs) if r.home)
    failed = [(side, r.problem) for side, r in (("PyTorch", torch_runs), ("JAX", jax_runs)) if r.problem]
    if not failed:
        return homes
    if len(failed) == 2:
        return homes + (
            f"; no module output was judged: neither side could be re-run in the other precision to "
            f"measure its rounding ({failed[0][1]}; {failed[1][1]})"
        )
    side, problem = failed[0]
    return homes + (
        f"; the {side} side could not be re-run in the other precision ({problem}): each module's "
        f"tolerance uses the other side's measured rounding for both"
    )


def broadcast_note(comparisons: Sequence[Comparison]) -> str:
    """The verdict's note on module outputs compared after broadcasting ("" when none was)."""
    shown = [
        f"`{c.parameter}`" for c in comparisons if c.coverage.startswith("every entry, after broadcasting")
    ]
    if not shown:
        return ""
    return (
        f"; compared after broadcasting one side's output to the other's shape (same values, e.g. a "
        f"(1, S, H) position embedding against a (B, S, H) one): {', '.join(shown)}"
    )


def redrawn_note(comparisons: Sequence[Comparison]) -> str:
    """The verdict's note on outputs whose re-run in the other precision was another computation
    ("" when none was): the first one's words, which name the side."""
    said = next((c.message for c in comparisons if REDRAWN in (c.message or "")), "")
    return f"; {said}" if said else ""
