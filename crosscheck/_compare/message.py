"""The one fixed message format of a comparison, and how an entry's index is written in it."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from crosscheck._compare.record import Comparison


def mismatch_message(c: Comparison) -> str:
    """The one fixed message format for a comparison (see README for an example).

    An index is said with the axes' names where the comparison has them ("(layer, row, col) (0, 1,
    2)"), else as "index (0, 7)"; the parameter is named where the comparison names one.
    """
    if c.status == "invalid":
        return c.message
    if c.status == "unjudgeable":
        of = f" of {named(c)}" if c.parameter else ""
        return f"All {c.total} entries{of} are unjudgeable: nothing was compared! ({reasons(c)})"
    pct = 100.0 * c.mismatched / max(c.judged, 1)
    lines = [
        f"Mismatched elements: {c.mismatched} / {c.judged} ({pct:.1f}%)"
        + (f" in {named(c)}" if c.parameter else "")
        + (f", {c.unjudgeable} unjudgeable ({reasons(c)})" if c.unjudgeable else ""),
        f"Greatest absolute difference: {c.max_abs_diff:.6g} at {_where(c, c.max_abs_diff_index)}",
        f"Greatest relative difference: {c.max_rel_diff:.6g} at {_where(c, c.max_rel_diff_index)}",
    ]
    terms = c.worst_terms or {}
    values = c.worst_values or {}
    shown = " + ".join(f"{name} {value:.3g}" for name, value in terms.items())
    worst = (f"`{c.parameter}` " if c.parameter else "") + index_text(c.worst_index)
    lines.append(
        f"Worst entry {worst}: {c.backend} {values.get('candidate', np.nan):.9g} vs "
        f"{c.reference} {values.get('reference', np.nan):.9g}, difference "
        f"{c.worst_ratio or 0.0:.3g} x the tolerance {sum(terms.values()):.3g} = {shown}; "
        f"decided by {c.decided_by}"
    )
    return "\n".join(lines)


def _where(c: Comparison, index: Sequence[int] | None) -> str:
    """``parameter `w1` index (7,)``, ``(layer, row, col) (0, 1, 2)``: an entry as messages name it."""
    axes = f"({', '.join(c.index_names)})" if c.index_names else "index"
    return (f"{named(c)} " if c.parameter else "") + f"{axes} {index_text(index)}"


def named(c: Comparison) -> str:
    """What a comparison is of, in words: ``parameter `w1```, or a module's output (``module``: a
    module output is no parameter) ``module output `gn2```."""
    if c.module is not None:
        return f"module output `{c.module or '(model)'}`"
    return f"parameter `{c.parameter}`"


def index_text(index: Sequence[int] | None) -> str:
    """An index as Python writes a tuple: ``(0, 1, 2)``, ``(7,)``, ``()``; ``-`` for none."""
    return str(tuple(int(i) for i in index)) if index is not None else "-"


def reasons(c: Comparison) -> str:
    """Why ``c``'s unjudgeable entries are: ``2 finite differences do not converge, ...`` ("none")."""
    return ", ".join(f"{n} {r}" for r, n in c.unjudgeable_reasons.items()) or "none"
