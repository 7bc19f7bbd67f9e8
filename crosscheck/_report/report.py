"""Reports: the result of one run as data (``to_dict``, the JSON contract) and as a terminal table.

A report knows no workload: what one adds (a section printed before the table or after it, a verdict
per candidate) its judge hands over (``Judge.extras``) as the records defined here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

from crosscheck._backends import placements
from crosscheck._compare.low import caveat
from crosscheck._compare.message import reasons
from crosscheck._compare.record import Comparison
from crosscheck._errors import one_line
from crosscheck._report.environment import framework_lines
from crosscheck._report.jsonfile import dump_json, finite
from crosscheck._report.text import markup, plain, plural
from crosscheck._types import Console

SCHEMA_VERSION = 1
#: Where a section is printed: before the table, or after it (and after the backends' failures).
PLACES = ("before", "after")

#: What a forward check's verdict that found no difference does not say (``--quantity output``: a port's
#: module outputs, no gradient); ``--quiet`` keeps it, as it keeps a 16-bit pass's caveat.
FORWARD_ONLY = (
    "a forward check: no gradient was computed, so a bug only in the backward pass is not seen; the full "
    "check (quantity `grad`) judges the gradients"
)


@dataclasses.dataclass(frozen=True)
class Section:
    """Something a workload prints in a report, handed over by its judge (``extras()["sections"]``).

    ``render(report, console)`` prints it on a ``rich`` console (text from backends as text: see
    ``crosscheck._report.text``); ``place`` is where (``PLACES``). Not part of the JSON report.
    """

    render: Callable[[Report, Console], None]
    place: str = "after"

    def __post_init__(self) -> None:
        if self.place not in PLACES:
            raise ValueError(f"`place` must be one of {', '.join(PLACES)}; found {self.place!r}.")


@dataclasses.dataclass(frozen=True)
class Verdict:
    """A workload's verdict on one candidate, in a line (a port's: where it first differs), handed over
    by its judge (``extras()["verdicts"]``, by candidate); ``fails``: the verdict fails the run."""

    text: str
    fails: bool = False


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
    #: Its workload's verdict on it, if any (the JSON has what the workload notes in ``notes``).
    verdict: Verdict | None = None

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(dataclasses.replace(self, verdict=None))
        del out["verdict"]
        out["device"] = self.info.get("device")
        out["platform"] = self.info.get("platform")
        out["device_kind"] = self.info.get("device_kind")
        return out


@dataclasses.dataclass(frozen=True)
class Report:
    """The outcome of one run; ``passed`` decides the exit status of the CLI.

    Example:
        >>> oracle = crosscheck.load_backend("numpy-fd")
        >>> def numpy_grad(weights, x):  # the oracle's gradient, rounded: a candidate that agrees
        ...     return oracle.grad(weights, x).astype(weights.dtype)
        >>> report = crosscheck.run(layers=2, dim=3, batch=2, backends=[numpy_grad])
        >>> report.passed, [c.backend for c in report.comparisons]
        (True, ['numpy_grad'])
        >>> report.to_dict()["passed"]  # the JSON report
        True
    """

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
    #: A workload judge's run-level findings (a user's workload's oracle): the verdict per candidate,
    #: coverage, evaluations, ``lines`` to print and ``problems`` (an empty check, ...) that fail the run.
    oracle: dict[str, Any] = dataclasses.field(default_factory=dict)
    #: What the workload prints besides the table (``Section``), in order; not part of the JSON.
    sections: tuple[Section, ...] = ()
    #: Why the run stopped before it had a report of its own (a contained workload's worker process
    #: died or hung): the first problem, and the JSON report's "halted".
    halted: str | None = None
    #: The run's placement, each setting by the name a user gives it (``Execution.placement``:
    #: ``jax_platform``, ...), in the JSON by framework ("jax_settings"; what ``replay`` applies again).
    placement: dict[str, str] = dataclasses.field(default_factory=dict)
    #: A check on an accelerator classified by re-runs (``_engine/classify``): the JSON's "classification";
    #: its ``problem``, where set, fails the check.
    classification: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def problems(self) -> list[str]:
        """One line per reason the run did not pass (empty when it passed)."""
        out: list[str] = []
        if self.interrupted:
            out.append("interrupted (Ctrl-C): the backends listed as skipped did not run")
        if self.halted:
            out.append(self.halted)
        ref = self.backends.get(self.reference)
        if not self.halted and (ref is None or ref.status != "ok"):
            detail = ref.error if ref is not None else "missing"
            out.append(f"the reference `{self.reference}` did not run: {detail}")
        for result in self.backends.values():
            if result.role == "candidate" and result.status == "failed":
                out.append(f"`{result.name}` failed: {result.error}")
            if result.role == "candidate" and result.status == "unavailable" and result.required:
                out.append(f"`{result.name}` was asked for but is unavailable: {result.error}")
        out += [
            f"`{name}`: {r.verdict.text}"
            for name, r in self.backends.items()
            if r.verdict is not None and r.verdict.fails
        ]
        disagree = [
            c
            for c in self.comparisons
            if not c.passed and c.status == "mismatch" and not (self.strict and c.mismatched == 0)
        ]
        out += _disagreements(disagree)
        out += [f"`{group[0].backend}`: {text}" for group, text in _said_once(self.comparisons).values()]
        out += [
            f"`{c.backend}`: every entry{_at(c, ' of')} is unjudgeable ({reasons(c)})"
            for c in self.comparisons
            if c.status == "unjudgeable"
        ]
        out += [
            f"`{c.backend}`: {c.unjudgeable} unjudgeable entries (--strict)"
            for c in self.comparisons
            if self.strict and c.unjudgeable and c.status == "mismatch" and c.mismatched == 0
        ]
        out += list(self.oracle.get("problems", []))
        if self.classification.get("problem"):  # what the re-runs found that fails the check
            out.append(self.classification["problem"])
        if not self.comparisons and not out:
            out.append("no candidate backend ran, so nothing was cross-checked")
        return [one_line(line) for line in out]  # a backend's name or error is one line of text here

    def verdicts(self) -> dict[str, str]:
        """The workload's verdict per candidate that has one (a port's: where the JAX port first differs)."""
        return {name: r.verdict.text for name, r in self.backends.items() if r.verdict is not None}

    def caveats(self) -> list[str]:
        """What the verdicts say the check could not see (a 16-bit pass: "check in float32 too"; a forward
        check that found no difference: the backward pass, ``FORWARD_ONLY``), a line
        per caveat, with the candidates it holds for: what ``--quiet`` keeps besides the verdict line."""
        found: dict[str, list[str]] = {}
        for name, text in self.verdicts().items():
            for said in (caveat(text), FORWARD_ONLY if FORWARD_ONLY in text else ""):
                if said:
                    found.setdefault(said, []).append(f"`{name}`")
        return [f"{', '.join(names)}: {text}" for text, names in found.items()]

    @property
    def passed(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        """The JSON report (keys are added over time, never renamed)."""
        return finite(
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
                **{record.key: record.options() for record in placements(self.placement)},
                "quantity": self.quantity,
                "interrupted": self.interrupted,
                **({"hvp_direction": self.direction} if self.quantity == "hvp" else {}),
                **({"oracle": self.oracle} if self.oracle else {}),
                **({"halted": self.halted} if self.halted else {}),
                **({"classification": self.classification} if self.classification else {}),
            }
        )

    def write_json(self, path: str | Path) -> None:
        """The JSON report (``to_dict``), indented, streamed to ``path`` (no string of it all is made)."""
        dump_json(self.to_dict(), path)

    def messages(self) -> list[tuple[str, bool]]:
        """What is printed after the table, before the backends' failures: ``(text, is_heading)``."""
        from crosscheck._report.tree import SUMMARY_MESSAGES, summarised

        out: list[tuple[str, bool]] = []
        told = 0  # a summarised report tells the first few failing rows' messages, then counts them
        once = {id(group[0]): (group, text) for group, text in _said_once(self.comparisons).values()}
        later = {id(c) for group, _ in once.values() for c in group[1:]}
        for c in self.comparisons:
            if id(c) in later:
                continue  # said once, with the first parameter of its cause
            if summarised(self.comparisons) and not c.passed and c.status != "empty":
                told += 1
                if told > SUMMARY_MESSAGES:
                    continue
            if id(c) in once:
                group, text = once[id(c)]
                out += [(_versus_all(group), True), (text, False)]
                continue
            if c.coverage != "every entry" and c.passed:
                if not self.oracle.get("lines"):  # a model oracle sums coverage up in its own lines
                    out.append((f"{c.backend}: {c.message}", False))
            elif c.status == "empty":
                continue  # the oracle's one line says so
            elif not c.passed or c.unjudgeable:
                out += [(versus(c), True), (c.message, False)]
        if told > SUMMARY_MESSAGES:
            more = told - SUMMARY_MESSAGES
            out.append((f"... and {more} more failing rows' messages (the JSON report has each)", False))
        return out + [(line, False) for line in self.oracle.get("lines", [])]

    def render(self, console: Console) -> None:
        """Print the table, the mismatch messages and a verdict line on a ``rich`` console. Text from
        backends and workloads (names, errors) is printed as text: escaped where the line is markup,
        without control characters everywhere."""
        from crosscheck._report.table import render_table
        from crosscheck._report.tree import summarised

        self._sections("before", console)
        if summarised(self.comparisons):  # a model of real size: its verdict first, then the summary
            self._verdict_line(console)
        if not self.halted:  # else there is nothing to show in a table
            render_table(self, console)
        for text, heading in self.messages():
            if heading:
                console.print(f"[bold]{markup(text)}[/bold]", highlight=False)
            else:
                console.print(plain(text), highlight=False, markup=False)
        for r in self.backends.values():
            if r.status in ("failed", "unavailable"):
                console.print(plain(f"{r.name}: {r.status}: {r.error}"), highlight=False, markup=False)
        self._sections("after", console)
        if self.explain:
            console.print(f"environment: {environment_line(self.environment)}", highlight=False, markup=False)
        for name, text in self.verdicts().items():
            console.print(plain(f"verdict of `{name}`: {text}"), highlight=False, markup=False)
        if self.classification:
            said = f"classified by re-runs: {self.classification['text']}"
            console.print(plain(said), highlight=False, markup=False)
        self._verdict_line(console)

    def _verdict_line(self, console: Console) -> None:
        """``PASSED: ...`` or ``FAILED: ...`` (every problem), in a line."""
        from crosscheck._report.table import summary

        if self.passed:
            console.print(f"[green]PASSED[/green]: {markup(summary(self))}", highlight=False)
        else:
            # A problem may quote `pip install 'crosscheck-gradients[torch]'` (markup) or a backend's name.
            console.print(f"[red]FAILED[/red]: {markup('; '.join(self.problems))}", highlight=False)

    def _sections(self, place: str, console: Console) -> None:
        for section in (s for s in self.sections if s.place == place):
            section.render(self, console)


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
    """One line per backend and question: "`jax` disagrees with `numpy-fd` at parameters `w1`, `b1`"
    (where the comparisons name what they are of: ``_where``); "`torch`'s gradient disagrees with
    differences of its own loss at `w1`" for a derivative question, "... differs from" another's loss."""
    grouped: dict[tuple[str, str, bool], list[Comparison]] = {}
    for c in disagree:
        grouped.setdefault((c.backend, c.reference, c.question == "derivative"), []).append(c)
    out = []
    for (b, r, own), found in grouped.items():
        if own:
            out.append(f"`{b}`'s gradient disagrees with differences of its own loss{_where(found)}")
        elif found[0].against.startswith(f"differences of `{r}`'s own"):  # neither is blamed here
            out.append(f"`{b}`'s gradient differs from {found[0].against}{_where(found)}")
        else:
            out.append(f"`{b}` disagrees with `{r}`{_where(found)}")
    return out


def _where(found: list[Comparison]) -> str:
    """What the comparisons are of, e.g. `` at module outputs `conv1`, `(model)`, and at parameters `w1`,
    `b1` ``: a port's module output is named as its module's output, not as a parameter (at most
    ``SHOWN`` names of each)."""
    modules = [f"`{c.module or '(model)'}`" for c in found if c.module is not None]
    parameters = [f"`{c.parameter}`" for c in found if c.module is None and c.parameter]
    parts = [plural(modules, "module output")] if modules else []
    parts += [plural(parameters)] if parameters else []
    return " at " + ", and at ".join(parts) if parts else ""


def _said_once(comparisons: list[Comparison]) -> dict[tuple[str, ...], tuple[list[Comparison], str]]:
    """The parameters not checked, by candidate and cause (``parameter `w`: the oracle's budget ran
    out``): each cause once, with every parameter it holds for, not a line per parameter."""
    found: dict[tuple[str, ...], tuple[list[Comparison], str]] = {}
    for c in comparisons:
        if c.status != "invalid":
            continue
        prefix = f"parameter `{c.parameter}`: "
        cause = c.message[len(prefix) :] if c.parameter and c.message.startswith(prefix) else c.message
        key = (c.backend, c.reference, c.against, cause if cause != c.message else str(id(c)))
        found.setdefault(key, ([], cause))[0].append(c)
    one = lambda group, cause: f"{plural([f'`{c.parameter}`' for c in group])}: {cause}"  # noqa: E731
    return {k: (g, g[0].message if len(g) == 1 else one(g, cause)) for k, (g, cause) in found.items()}


def _versus_all(group: list[Comparison]) -> str:
    """``versus`` of comparisons that differ only in their parameter."""
    if len(group) == 1:
        return versus(group[0])
    head = versus(dataclasses.replace(group[0], parameter=None))
    return (
        head.replace(" (", f", {len(group)} parameters (", 1)
        if "(" in head
        else f"{head}, {len(group)} parameters"
    )


def versus(c: Comparison) -> str:
    """The heading of a comparison's message: "jax vs numpy-fd, parameter `w1`", and what the reference
    is when it is not the workload's NumPy reference ("(differences of `jax`'s own float64 loss)")."""
    head = f"{c.backend} vs {c.reference}{_at(c, ',')}"
    if c.against and c.against != "differences of the NumPy reference":
        return f"{head} ({c.against})"
    return head


def _at(c: Comparison, prefix: str = " at") -> str:
    """What a comparison is of, e.g. " at parameter `w1`", " at module output `gn2`" (a module's
    output is no parameter); nothing where it names neither."""
    if c.module is not None:
        return f"{prefix} module output `{c.module or '(model)'}`"
    return f"{prefix} parameter `{c.parameter}`" if c.parameter else ""
