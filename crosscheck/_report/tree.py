"""The table of a model of real size, summarised by module: its failing rows first, each in full, then
the module tree of the rows that passed, collapsed where everything agrees.

A report with a few rows (the stack, a port of six tensors) is shown row by row. One with more than
``SUMMARY_ROWS`` comparisons (a port of 200 tensors has a row per gradient and per module output) would
be hundreds of rows: there, per candidate, the first ``SUMMARY_FAILING`` rows that failed (or have
unjudgeable entries) are shown as they are, and the others are grouped by their parameter's module
path (``blocks.3.fc.weight``: ``blocks``, ``3``, ``fc``): a module whose rows all passed (or all
failed) is one ``Group`` row, consecutive numbered siblings alike one row too (``blocks.4-49``), and a
module with rows of both kinds is opened; the groups that failed come first. The JSON report keeps
every comparison.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from crosscheck._compare.record import Comparison

#: A report with more comparisons than this is summarised by module.
SUMMARY_ROWS = 40
#: How many failing comparisons' messages a summarised report prints after the table.
SUMMARY_MESSAGES = 5
#: How many failing rows a summarised table shows in full (the first, in the report's order).
SUMMARY_FAILING = 10


@dataclasses.dataclass(frozen=True)
class Group:
    """The rows of one module subtree (or a run of numbered siblings) that all passed, or all failed:
    one row."""

    label: str
    comparisons: tuple[Comparison, ...]
    failed: bool = False

    @property
    def unjudgeable(self) -> int:
        return sum(c.unjudgeable for c in self.comparisons)

    @property
    def total(self) -> int:
        return sum(c.total for c in self.comparisons)

    def greatest(self, field: str) -> float | None:
        values = [getattr(c, field) for c in self.comparisons if getattr(c, field) is not None]
        return max(values) if values else None


def summarised(comparisons: Sequence[Comparison]) -> bool:
    """Whether a report's table is summarised by module (more than ``SUMMARY_ROWS`` comparisons)."""
    return len(comparisons) > SUMMARY_ROWS


def failing(c: Comparison) -> bool:
    """A row a summary shows in full: it failed, or it has entries nobody could judge."""
    return not c.passed or bool(c.unjudgeable)


def arrange(comparisons: Sequence[Comparison]) -> list[Comparison | Group]:
    """One candidate's rows, summarised: the first ``SUMMARY_FAILING`` failing ones in full, then the
    groups of the others, those that failed first."""
    shown = [c for c in comparisons if failing(c)][:SUMMARY_FAILING]
    hidden = {id(c) for c in shown}  # in the tree (a module with one of them is opened), not in a group
    found = _groups((), [(_tokens(c), c) for c in comparisons])
    groups = [g for g in (_without(g, hidden) for g in found) if g.comparisons]
    return [*shown, *[g for g in groups if g.failed], *[g for g in groups if not g.failed]]


def _without(group: Group, hidden: set[int]) -> Group:
    kept = tuple(c for c in group.comparisons if id(c) not in hidden)
    return dataclasses.replace(group, comparisons=kept)


def _tokens(c: Comparison) -> tuple[str, ...]:
    """The module path of a row: its parameter's name up to a space (``h.0.ln_1 (output)``), by dots."""
    name = (c.parameter or "").split(" ")[0]
    return tuple(name.split(".")) if name else ()


Items = list[tuple[tuple[str, ...], Comparison]]


def _state(items: Items) -> bool | None:
    """True: every row failed; False: every row passed; None: some of each."""
    states = {failing(c) for _, c in items}
    return next(iter(states)) if len(states) == 1 else None


def _groups(prefix: tuple[str, ...], items: Items) -> list[Group]:
    """The groups under ``prefix``: one where its rows all passed or all failed (below the root),
    else its own rows' and its children's (runs of numbered siblings alike merged)."""
    state = _state(items)
    if not items:
        return []
    if state is not None and prefix:
        return [Group(_label(prefix), tuple(c for _, c in items), state)]
    own = [(t, c) for t, c in items if len(t) == len(prefix)]
    out = [
        Group(_label(prefix) + " itself", tuple(c for _, c in own if failing(c) == failed), failed)
        for failed in (True, False)
        if any(failing(c) == failed for _, c in own)
    ]
    children: dict[str, Items] = {}
    for tokens, c in items:
        if len(tokens) > len(prefix):
            children.setdefault(tokens[len(prefix)], []).append((tokens, c))
    run: list[str] = []
    for name, inside in children.items():
        alike = name.isdigit() and _state(inside) is not None
        if run and not (alike and _state(inside) == _state(children[run[0]])):
            out += _run(prefix, run, children)
            run = []
        if alike:
            run.append(name)
        else:
            out += _groups((*prefix, name), inside)
    return out + _run(prefix, run, children)


def _run(prefix: tuple[str, ...], run: list[str], children: dict[str, Items]) -> list[Group]:
    """Consecutive numbered siblings whose rows all passed (or all failed), as one group (``blocks.4-49``)."""
    if not run:
        return []
    label = run[0] if len(run) == 1 else f"{run[0]}-{run[-1]}"
    inside = tuple(c for name in run for _, c in children[name])
    return [Group(_label((*prefix, label)), inside, failing(inside[0]))]


def _label(path: tuple[str, ...]) -> str:
    return ".".join(path) if path else "(everything)"
