"""Reports: the result of one run as data (``to_dict``, the JSON contract) and as a terminal table."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

from crosscheck._compare.compare import Comparison
from crosscheck._errors import one_line
from crosscheck._report.environment import framework_lines
from crosscheck._report.text import markup, plain

SCHEMA_VERSION = 1


@dataclasses.dataclass(frozen=True)
class BackendResult:
    """What happened to one backend: ``status`` is ok, failed, unavailable or pending."""

    name: str
    status: str
    role: str = "candidate"
    required: bool = False
    dtype: str | None = None
    seconds: float | None = None
    error: str | None = None
    info: dict[str, str] = dataclasses.field(default_factory=dict)
    notes: dict[str, Any] = dataclasses.field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["device"] = self.info.get("device")
        return out


@dataclasses.dataclass(frozen=True)
class Report:
    """The outcome of one run; ``passed`` decides the exit status of the CLI."""

    case: dict[str, Any]
    backends: dict[str, BackendResult]
    comparisons: list[Comparison]
    reference: str
    strict: bool = False
    environment: dict[str, Any] = dataclasses.field(default_factory=dict)
    explain: bool = False
    #: The inputs and every gradient computed (not part of the JSON; a repro bundle saves them).
    inputs: tuple[Any, Any] | None = dataclasses.field(default=None, repr=False)
    gradients: dict[str, Any] = dataclasses.field(default_factory=dict, repr=False)
    #: What was cross-checked: "grad" (the gradient) or "hvp" (a Hessian-vector product along
    #: ``direction``, described in the JSON report's "hvp_direction").
    quantity: str = "grad"
    direction: dict[str, Any] = dataclasses.field(default_factory=dict)
    #: The user pressed Ctrl-C: what finished is reported, the rest is listed as not run.
    interrupted: bool = False
    #: A workload judge's run-level findings (``crosscheck._workloads.user.summary``): the verdict per
    #: candidate, coverage, evaluations, and ``problems`` (an empty check, ...) that fail the run.
    oracle: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def problems(self) -> list[str]:
        """One line per reason the run did not pass (empty when it passed)."""
        out: list[str] = []
        if self.interrupted:
            out.append("interrupted (Ctrl-C): the backends listed as skipped did not run")
        ref = self.backends.get(self.reference)
        if ref is None or ref.status != "ok":
            detail = ref.error if ref is not None else "missing"
            out.append(f"the reference `{self.reference}` did not run: {detail}")
        for result in self.backends.values():
            if result.role == "candidate" and result.status == "failed":
                out.append(f"`{result.name}` failed: {result.error}")
            if result.role == "candidate" and result.status == "unavailable" and result.required:
                out.append(f"`{result.name}` was asked for but is unavailable: {result.error}")
        out += [
            f"`{name}`: {r.notes['port']['text']}"
            for name, r in self.backends.items()
            if name in self.verdicts() and r.notes["port"].get("starts_in") != "nowhere"
        ]
        disagree = [
            c
            for c in self.comparisons
            if not c.passed and c.status == "mismatch" and not (self.strict and c.mismatched == 0)
        ]
        out += _disagreements(disagree)
        out += [f"`{c.backend}`: {c.message}" for c in self.comparisons if c.status == "invalid"]
        out += [
            f"`{c.backend}`: every entry{_at(c, ' of')} is unjudgeable"
            for c in self.comparisons
            if c.status == "unjudgeable"
        ]
        out += [
            f"`{c.backend}`: {c.unjudgeable} unjudgeable entries (--strict)"
            for c in self.comparisons
            if self.strict and c.unjudgeable and c.status == "mismatch" and c.mismatched == 0
        ]
        out += list(self.oracle.get("problems", []))
        if not self.comparisons and not out:
            out.append("no candidate backend ran, so nothing was cross-checked")
        return [one_line(line) for line in out]  # a backend's name or error is one line of text here

    def verdicts(self) -> dict[str, str]:
        """A port's verdict per candidate: where the JAX port first differs (``notes["port"]``)."""
        return {
            name: str(r.notes["port"]["text"])
            for name, r in self.backends.items()
            if isinstance(r.notes.get("port"), dict) and "text" in r.notes["port"]
        }

    @property
    def passed(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        """The JSON report (keys are added over time, never renamed)."""
        return _finite(
            {
                "schema_version": SCHEMA_VERSION,
                "passed": self.passed,
                "problems": self.problems,
                "case": self.case,
                "reference": self.reference,
                "strict": self.strict,
                "backends": {name: r.to_dict() for name, r in self.backends.items()},
                "comparisons": [c.to_dict() for c in self.comparisons],
                "environment": self.environment,
                "quantity": self.quantity,
                "interrupted": self.interrupted,
                **({"hvp_direction": self.direction} if self.quantity == "hvp" else {}),
                **({"oracle": self.oracle} if self.oracle else {}),
            }
        )

    def write_json(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=2) + "\n")

    def messages(self) -> list[tuple[str, bool]]:
        """What is printed after the table, before the backends' failures: ``(text, is_heading)``."""
        out = []
        for c in self.comparisons:
            if c.coverage != "every entry" and c.passed:
                if not self.oracle.get("lines"):  # a model oracle sums coverage up in its own lines
                    out.append((f"{c.backend}: {c.message}", False))
            elif c.status == "empty":
                continue  # the oracle's one line says so
            elif not c.passed or c.unjudgeable:
                out += [(versus(c), True), (c.message, False)]
        return out + [(line, False) for line in self.oracle.get("lines", [])]

    def render(self, console: Any) -> None:
        """Print the table, the mismatch messages and a verdict line on a ``rich`` console.

        Text from backends and workloads (names, errors, parameter names) is printed as text: escaped
        where the line is markup, without control characters everywhere.
        """
        from crosscheck._report.table import render_table, summary

        if isinstance(self.case.get("mapping"), list):  # a port: the mapping comes before any numerics
            from crosscheck._workloads.port.mapping import render

            console.print(render(self.case["mapping"]), highlight=False, markup=False)
        render_table(self, console)
        for text, heading in self.messages():
            if heading:
                console.print(f"[bold]{markup(text)}[/bold]", highlight=False)
            else:
                console.print(plain(text), highlight=False, markup=False)
        for r in self.backends.values():
            if r.status in ("failed", "unavailable"):
                console.print(plain(f"{r.name}: {r.status}: {r.error}"), highlight=False, markup=False)
        if self.explain:
            for c in self.comparisons:
                render_explain(c, console)
            console.print(f"environment: {environment_line(self.environment)}", highlight=False, markup=False)
        for name, text in self.verdicts().items():
            console.print(plain(f"verdict of `{name}`: {text}"), highlight=False, markup=False)
        if self.passed:
            console.print(f"[green]PASSED[/green]: {markup(summary(self))}", highlight=False)
        else:
            # A problem may quote `pip install 'crosscheck-gradients[torch]'` (markup to rich) or a
            # backend's name.
            console.print(f"[red]FAILED[/red]: {markup('; '.join(self.problems))}", highlight=False)


def render_explain(c: Comparison, console: Any) -> None:
    """Layer by layer: the forward activations and the gradient, each in units of its tolerance."""
    from rich.table import Table

    from crosscheck._workloads.stack.explain import verdict

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
    for entry in c.worst_entries:
        terms = ", ".join(f"{k} {v:.3g}" for k, v in entry["terms"].items())
        kink = f"; ReLU kink nearby at (layer, row, unit) {tuple(entry['kink'])}" if entry["kink"] else ""
        console.print(
            f"  {tuple(entry['index'])}: {plain(c.backend)} {entry['candidate']:.9g} vs "
            f"{entry['reference']:.9g}, {entry['ratio']:.3g} x tolerance ({terms}){kink}",
            highlight=False,
            markup=False,
        )


def environment_line(env: dict[str, Any]) -> str:
    """The precision-relevant part of the environment record, in one line."""
    parts = [f"python {env.get('python')}", f"{env.get('cpu_count')} CPUs"]
    numpy = env.get("numpy", {})
    parts.append(f"numpy {numpy.get('version')} (subnormals flushed: {numpy.get('subnormals_flushed')})")
    parts += framework_lines(env)
    threads = {k: v for k, v in env.get("thread_variables", {}).items() if v is not None}
    if threads:
        parts.append(", ".join(f"{k}={v}" for k, v in threads.items()))
    return "; ".join(parts)


def _disagreements(disagree: list[Comparison]) -> list[str]:
    """One line per backend and question: "`jax` disagrees with `numpy-fd`", "at parameters `w1`, `b1`"
    where the comparisons name their parameters; "`torch`'s gradient disagrees with differences of its
    own loss at parameter `w1`" for a workload's derivative question."""
    grouped: dict[tuple[str, str, bool], list[str]] = {}
    for c in disagree:
        key = (c.backend, c.reference, c.question == "derivative")
        grouped.setdefault(key, []).extend([f"`{c.parameter}`"] if c.parameter else [])
    out = []
    for (b, r, own), p in grouped.items():
        where = f" at parameter{'s' if len(p) > 1 else ''} {_some(p)}" if p else ""
        out.append(f"`{b}`'s gradient disagrees with differences of its own loss{where}" if own else
                   f"`{b}` disagrees with `{r}`{where}")  # fmt: skip
    return out


def versus(c: Comparison) -> str:
    """The heading of a comparison's message: "jax vs numpy-fd, parameter `w1`", and what the reference
    is when it is not the workload's NumPy reference ("(differences of `jax`'s own float64 loss)")."""
    head = f"{c.backend} vs {c.reference}{_at(c, ',')}"
    if c.against and c.against != "differences of the NumPy reference":
        return f"{head} ({c.against})"
    return head


def _some(names: list[str], shown: int = 8) -> str:
    """The first ``shown`` names, then how many more (a port's table has a row per module)."""
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more


def _at(c: Comparison, prefix: str = " at") -> str:
    """Which parameter a comparison is of, e.g. " at parameter `w1`" (nothing where it names none)."""
    return f"{prefix} parameter `{c.parameter}`" if c.parameter else ""


def _finite(value: Any) -> Any:
    """JSON has no NaN or infinity: write them as strings rather than emit invalid JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value
