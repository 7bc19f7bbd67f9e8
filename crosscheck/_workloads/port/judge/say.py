"""A port candidate's verdict in words (``said``): where its difference starts (``locate``), the
comparisons behind it, the notes on outputs compared after broadcasting or re-run as another computation,
the caveats of its captures, what a 16-bit pass hides, and the sides that computed wider than the dtype
(``wide``). The judge puts it on the candidate's record (``notes["port"]``) and the run's verdicts.
"""

from __future__ import annotations

import dataclasses

from crosscheck._report.report import Verdict
from crosscheck._workloads.port.judge import caveats, wide
from crosscheck._workloads.port.judge.verdict import Located, Origin


def said(
    name: str,
    located: Located,
    reference: str,
    *,
    forward: bool,
    low: Verdict | None,
    wider: dict[str, bool],
    dtype: str,
) -> Origin:
    """Candidate ``name``'s origin in the verdict's words; ``reference``: the run's reference (the
    gradients' comparisons are with it); ``low``: the model judge's 16-bit verdict on the candidate
    (None: none); ``wider``: per side, whether it computed in float32 (``wide.sides``)."""
    origin, comparisons = located.origin, located.comparisons
    text = origin.text + behind(origin, name, reference, forward=forward)
    text += caveats.broadcast_note(comparisons) + caveats.redrawn_note(comparisons) + located.caveats
    if low is not None and origin.starts_in == "nowhere":  # a 16-bit pass: what it hides
        text = f"{text}; {low.text}"
    return dataclasses.replace(origin, text=text + wide.said(wider, dtype, text))


def behind(origin: Origin, name: str, reference: str, *, forward: bool = False) -> str:
    """The comparisons behind a port's verdict where it judges the gradients too (they are compared with
    the run's reference, which need not be PyTorch); a verdict on the forward pass alone says which
    comparison it is ("the forward pass differs first at ...": the port's module outputs against
    PyTorch's), and one that could not compare says why. A forward check compares module outputs only."""
    if origin.starts_in in ("unknown", "forward"):
        return ""
    if forward:
        return f" (`{name}` vs `torch`: module outputs)"
    if reference == "torch":
        return f" (`{name}` vs `torch`: module outputs and gradients)"
    return f" (`{name}` vs `torch`: module outputs; `{name}` vs `{reference}`: gradients)"
