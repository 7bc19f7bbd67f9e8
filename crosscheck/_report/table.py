"""The one terminal table of a report: the reference, then each candidate's row per comparison.

A comparison that names its parameter (a workload's ``w1``) adds the parameter column; the worst
entry's column is headed by the index names the comparisons share (the stack's ``(l,r,c)``). Every
string that comes from a backend or a workload is shown as text, never read as markup.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from crosscheck._backends import DECLARED
from crosscheck._compare.constants import BOUNDARY
from crosscheck._compare.message import index_text
from crosscheck._compare.record import Comparison
from crosscheck._report.text import markup, markup_lines
from crosscheck._report.tree import Group, arrange, summarised
from crosscheck._types import Console

if TYPE_CHECKING:  # rich is imported when a table is made
    from rich.table import Table


class Row(Protocol):
    """What the table reads of a backend's result (``report.BackendResult``)."""

    @property
    def role(self) -> str: ...
    @property
    def status(self) -> str: ...
    @property
    def required(self) -> bool: ...
    @property
    def dtype(self) -> str | None: ...
    @property
    def seconds(self) -> float | None: ...
    @property
    def name(self) -> str: ...
    @property
    def info(self) -> dict[str, str]: ...


class Tabled(Protocol):
    """What the table reads of a report: ``report.Report``, which prints its table (``render``) and so
    is named here by what it offers, not imported."""

    @property
    def case(self) -> dict[str, Any]: ...
    @property
    def backends(self) -> Mapping[str, Row]: ...
    @property
    def comparisons(self) -> list[Comparison]: ...
    @property
    def reference(self) -> str: ...
    @property
    def quantity(self) -> str: ...
    @property
    def oracle(self) -> dict[str, Any]: ...


FAIL, OK = "[red]FAIL[/red]", "[green]ok[/green]"
#: A port's module output that differs where the model's output and every gradient agree.
EDGE = "[yellow]boundary[/yellow]"
#: Columns after backend (and parameter); the worst entry's header is made from the index names.
NUMBERS = ("max abs diff", "max rel diff", None, "tolerance there", "decided by")


def table(report: Tabled) -> Table:
    """A rich table of ``report``: a row for the reference, then one per candidate and comparison."""
    from rich.table import Table

    headers, rows = _headers_and_rows(report)
    t = Table(title=markup_lines(title(report)), title_justify="left")
    for column in headers:
        # Two-line headers keep the table narrow; it is printed only at its natural width
        # (``render_table``), so no cell is ever shrunk: a name stays whole, a number too.
        head, _, tail = column.rpartition(" ")
        t.add_column(
            f"{head}\n{tail}" if head else column,
            justify="left" if column in NAMES else "right",
            overflow="fold",
        )
    for row in rows:
        t.add_row(*row)
    return t


def render_table(report: Tabled, console: Console) -> None:
    """Print the table where it fits the console's width whole; on a narrower terminal (or for names
    too long for a table) the same cells as one paragraph per row (``records``): no name or number is
    ever cut short or folded."""
    from rich.measure import Measurement

    t = table(report)
    unbounded = console.options.update(max_width=1_000_000)
    if Measurement.get(console, unbounded, t).maximum <= console.width:
        console.print(t)
        return
    console.print(markup_lines(title(report)), highlight=False)
    for line in records(report):
        console.print(line, highlight=False)


def records(report: Tabled) -> list[str]:
    """The table's rows as lines (markup): ``backend parameter: verdict (header value, ...)``."""
    headers, rows = _headers_and_rows(report)
    lines, backend = [], ""
    for row in rows:
        cells = dict(zip(headers, row, strict=True))
        backend = cells.pop("backend") or backend
        who = " ".join(n for n in (backend, cells.pop("parameter", "")) if n)
        verdict = cells.pop("verdict")
        rest = ", ".join(f"{header} {value}" for header, value in cells.items() if value)
        lines.append(f"{who}: {verdict}" + (f" ({rest})" if rest else ""))
    return lines


#: The columns that hold names (left-aligned).
NAMES = ("backend", "parameter", "check")


def _headers_and_rows(report: Tabled) -> tuple[list[str], list[list[str]]]:
    named = any(c.parameter for c in report.comparisons)
    checks = any(c.question for c in report.comparisons)  # a model oracle's two questions
    head = ["backend", *(["parameter"] if named else []), *(["check"] if checks else []), "dtype", "time"]
    headers = [*head, *(n or worst_header(report.comparisons) for n in NUMBERS), "unjudgeable", "verdict"]
    by_backend: dict[str, list[Comparison]] = {}
    for c in report.comparisons:
        by_backend.setdefault(c.backend, []).append(c)
    rows = []
    short = summarised(report.comparisons)
    for name, result in report.backends.items():
        rows += _rows(name, result, by_backend.get(name, []), named=named, checks=checks, summarised=short)
    return headers, rows


#: The "check" column: which question a model oracle's comparison answers.
CHECK = {"derivative": "derivative", "same function": "function"}


def _rows(
    name: str,
    r: Row,
    comparisons: list[Comparison],
    *,
    named: bool,
    checks: bool = False,
    summarised: bool = False,
) -> list[list[str]]:
    """A backend's rows: one per comparison (its name and time on the first), or one saying its status
    (``reference``, or why it has no comparison: ``failed``, ``unavailable``, ``skipped``)."""
    time_s = f"{r.seconds:.3f}s" if r.seconds is not None else "-"
    first = [markup(name), markup(r.dtype or "-"), time_s]
    if r.role == "reference" or not comparisons:
        failed = r.status == "failed" or (r.status == "unavailable" and r.required)
        verdict = "reference" if r.role == "reference" and r.status == "ok" else r.status
        if failed or (r.role == "reference" and r.status != "ok"):
            verdict = f"[red]{verdict}[/red]"
        names = [""] * named + [""] * checks
        return [_cells(first, names, [""] * len(NUMBERS), "", verdict)]
    rows = []
    shown_rows = arrange(comparisons) if summarised else comparisons
    for i, c in enumerate(shown_rows):
        shown = first if i == 0 else ["", first[1], ""]
        if isinstance(c, Group):
            n = len(c.comparisons)
            label = f"{c.label} ({n} row{'s' * (n != 1)})"
            unjudged = f"{c.unjudgeable}/{c.total}" if c.unjudgeable else "0"
            edge = any(m.status == BOUNDARY for m in c.comparisons)
            verdict = FAIL if c.failed else EDGE if edge else OK
            rows.append(
                _cells(shown, [markup(label)] * named + [""] * checks, _greatest(c), unjudged, verdict)
            )
            continue
        unjudged = f"{c.unjudgeable}/{c.total}" if c.unjudgeable else "0"
        names = [markup(c.parameter or "")] * named + [CHECK.get(c.question or "", "")] * checks
        verdict = EDGE if c.status == BOUNDARY else OK if c.passed else FAIL
        rows.append(_cells(shown, names, _numbers(c), unjudged, verdict))
    return rows


def _greatest(group: Group) -> list[str]:
    """A group's greatest differences (the rest of its numbers are its rows' own: in the JSON)."""
    found = [group.greatest("max_abs_diff"), group.greatest("max_rel_diff")]
    return [f"{v:.3g}" if v is not None else "" for v in found] + ["", "", ""]


def _cells(first: list[str], names: list[str], numbers: list[str], unjudged: str, verdict: str) -> list[str]:
    """One row in the table's column order (``names``: the parameter and check cells the table has)."""
    return [*first[:1], *names, *first[1:], *numbers, unjudged, verdict]


def _numbers(c: Comparison) -> list[str]:
    """The greatest differences, the worst entry's index, its tolerance and deciding term (or blanks;
    ``dirs`` where a model oracle judged the parameter along directions only)."""
    if c.max_abs_diff is None or c.max_rel_diff is None:
        where = "dirs" if c.coverage.startswith("screened") and c.question else ""
        return ["", "", where, "", c.decided_by or ""]
    return [
        f"{c.max_abs_diff:.3g}",
        f"{c.max_rel_diff:.3g}",
        index_text(c.worst_index),
        f"{sum((c.worst_terms or {}).values()):.3g}",
        c.decided_by or "",
    ]


def worst_header(comparisons: Sequence[Comparison]) -> str:
    """``worst (l,r,c)`` when every comparison names its axes alike (their initials), else ``worst index``."""
    names = {tuple(c.index_names or ()) for c in comparisons}
    if len(names) != 1 or not next(iter(names)):
        return "worst index"
    return "worst (" + ",".join(markup(n[:1]) for n in next(iter(names))) + ")"


def title(report: Tabled) -> str:
    """``crosscheck: layers=8, ...`` or ``crosscheck: workload=mlp, dtype=float32, seed=0; parameters w1
    (4, 8), b1 (8,); inputs x (5, 4)``: the case's values, then its named shapes."""
    case = report.case
    scalars = [
        f"{k}={v}"
        for k, v in case.items()
        if not isinstance(v, (dict, list)) and not k.endswith("sha256") and k != "oracle_differentiates"
    ]
    if report.quantity != "grad":
        scalars.append(f"quantity={report.quantity}")
    shapes = [
        f"{k} " + ", ".join(f"{name} {_shape(shape)}" for name, shape in v.items())
        if len(v) <= TITLE_SHAPES
        else f"{k}: {len(v)} arrays (each in the JSON report's case)"
        for k, v in case.items()
        if isinstance(v, dict) and v
    ]
    line = "crosscheck: " + "; ".join([", ".join(scalars), *shapes])
    where = where_line(report.backends)
    if where:
        line += f"\n{where}"
    source = str(case.get("oracle_differentiates", "reference"))
    if report.quantity == "output":  # the forward check: no gradient, so no oracle, by design
        line += (
            f"\na forward check: each module's output is compared with `{report.reference}`'s; no gradient "
            "is computed and no oracle runs"
        )
    elif source.startswith("surrogate"):
        line += "\nthe oracle differentiates the workload's surrogate, built at this point"
    elif source.startswith("nothing"):  # no oracle ran: name the one comparison made, if any
        ref = report.reference  # the title is escaped where it is printed (``markup_lines``)
        line += (
            f"\nno oracle ran: each candidate's gradient is compared with `{ref}`'s; no derivative is "
            f"checked (`--reference {ref}`)"
            if "backend" in source
            else f"\nno oracle ran: the reference `{ref}` failed or did not run"
        )
    elif source != "reference":
        line += f"\nthe oracle differentiates {source}"
    return line


#: The keys of a backend's ``info()`` that name its arithmetic settings, as the header says them: each
#: framework's, as its folder declares them (``Framework.arithmetic_info``).
PRECISION_KEYS = {key: words for framework in DECLARED for key, words in framework.arithmetic_info.items()}


def where_line(backends: Mapping[str, Row]) -> str:
    """``where: `jax` on tpu (TPU v5 lite), matmul precision default; `torch` on cpu (cpu), float32
    matmul precision highest``: each backend whose ``info()`` says where it ran (its ``platform``), its
    device kind and arithmetic settings; empty when none says."""
    parts = []
    for row in backends.values():
        info = row.info
        if "platform" not in info:
            continue
        settings = [f", {words} {info[key]}" for key, words in PRECISION_KEYS.items() if key in info]
        kind = f" ({info['device_kind']})" if "device_kind" in info else ""
        parts.append(f"`{row.name}` on {info['platform']}{kind}{''.join(settings)}")
    return "where: " + "; ".join(parts) if parts else ""


#: The title names each array and its shape up to this many; beyond, it counts them.
TITLE_SHAPES = 12


def _shape(shape: Any) -> str:
    return str(tuple(shape)) if isinstance(shape, (list, tuple)) else str(shape)


def _parameters(report: Tabled) -> tuple[list[str], list[str], list[str]]:
    """The parameters the comparisons are of, the modules whose outputs they compare (a port's row
    ``conv1 (output)``: ``conv1``), and their other named rows, in the report's order: a parameter is
    one the case lists, where it lists them."""
    rows = [c for c in report.comparisons if c.parameter]
    modules = list(dict.fromkeys(c.module or "(model)" for c in rows if c.module is not None))
    named = list(dict.fromkeys(c.parameter or "" for c in rows if c.module is None))
    listed = report.case.get("parameters")
    if not isinstance(listed, (list, dict)) or not listed:
        return named, modules, []
    return [n for n in named if n in listed], modules, [n for n in named if n not in listed]


def _few(names: list[str], shown: int = 2) -> str:
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(f"`{n}`" for n in names[:shown]) + more


def _counted(names: list[str], noun: str) -> str:
    """E.g. `` and 4 module outputs (`conv1`, `bn1` and 2 more)``; "" where there are none."""
    return f" and {len(names)} {noun}{'s' if len(names) > 1 else ''} ({_few(names)})" if names else ""


def summary(report: Tabled) -> str:
    """The PASSED line: how many candidates agree (on how many parameters), and what was unjudgeable."""
    backends = {c.backend for c in report.comparisons}
    parameters, modules, others = _parameters(report)
    on = f" on all {len(parameters)} parameters" if len(parameters) > 1 else ""
    on = " on its 1 parameter" if len(parameters) == 1 else on
    skipped = report.oracle.get("not_checked") or {}  # parameters a workload left out, and why
    if skipped:
        total = len(parameters) + len(skipped)
        on = f" on {len(parameters)} of {total} parameters ({len(skipped)} not checked)"
    on += _counted(modules, "module output") + _counted(others, "other row")  # neither counted as parameters
    return f"{len(backends)} candidate(s) agree with `{report.reference}`{on}{not_judged(report)}"


def not_judged(report: Any) -> str:
    """What the PASSED line says a passing check did not judge entry by entry: what a screen left to its
    directions (``screened``) and the entries unjudgeable (`` (screened: ...); 12 entries unjudgeable
    (12 float32 rounding may flip several ReLUs)``); "" where every entry was judged. ``--quiet``
    prints it too."""
    reasons: dict[str, int] = {}
    for c in report.comparisons:
        for reason, n in c.unjudgeable_reasons.items():
            reasons[reason] = reasons.get(reason, 0) + n
    unjudged = sum(c.unjudgeable for c in report.comparisons)
    why = ", ".join(f"{n} {reason}" for reason, n in reasons.items())
    tail = f"; {unjudged} entries unjudgeable ({why})" if unjudged else ""
    return screened(report) + tail


def screened(report: Any) -> str:
    """What a passing check did not judge entry by entry, as the PASSED line says it (`` (screened: 64
    of 524288 entries judged one by one, ...)``; its workload's ``oracle`` section's ``screened``), or
    "" where every entry was judged."""
    said = (getattr(report, "oracle", None) or {}).get("screened")
    return f" ({said})" if isinstance(said, str) and said else ""
