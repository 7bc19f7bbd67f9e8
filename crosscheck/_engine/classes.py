"""The classes a check with its JAX side on an accelerator is classified into (``classify``), each run's
record (``Run``) and what each class says (``Classification``).

A run's record is its own report's: where its side said it ran (``side``), at what precision, whether it
passed, its problems, and whether a re-run was made as asked (``Run.made``): a re-run asked at
``highest`` whose side says another precision, or one asked on the host CPU whose side says a device,
was not, and confirms or explains nothing.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from crosscheck._report.report import Report

#: The classes (``Classification.kind``): a failure's (``precision``, ``device``, ``port``), a pass
#: below ``highest`` (``confirmed``, ``hidden``, ``device``), and a classification whose re-runs were
#: not made as asked (``unconfirmed``: a pass; ``unclassified``: a failure).
KINDS = ("precision", "device", "port", "confirmed", "hidden", "unconfirmed", "unclassified")


def side(report: Report) -> dict[str, str] | None:
    """Where the report's JAX side said it ran (a candidate's ``info`` naming its matmul precision): its
    ``platform``, ``device_kind`` and ``matmul_precision``; None where no candidate says."""
    for result in report.backends.values():
        if result.role == "candidate" and "matmul_precision" in result.info:
            return dict(result.info)
    return None


def level(info: dict[str, str]) -> str:
    """The matmul precision level ``info`` names (``default``, ``high``, ``highest``)."""
    from crosscheck._compare.device import level as named

    return named(info.get("matmul_precision"))


@dataclasses.dataclass(frozen=True)
class Run:
    """One run of a classification: its ``label`` (``as asked``, ``highest``, ``host CPU``), its
    ``report``, ``where`` its own JAX side said it ran (``side``; empty where it said nothing), and
    ``made``: whether it ran where and how it was asked (the as-asked run always)."""

    label: str
    report: Report
    where: dict[str, str]
    made: bool

    @classmethod
    def of(cls, label: str, report: Report, asked: dict[str, str]) -> Run:
        """The run ``label`` of ``report``, its side's own ``where``; ``asked``: the as-asked run's."""
        where = side(report) or {}
        if label == "highest":
            made = level(where) == "highest" and where.get("platform") == asked.get("platform")
        else:
            made = label != "host CPU" or where.get("platform") == "cpu"
        return cls(label, report, where, made)

    @property
    def passed(self) -> bool:
        return self.report.passed

    @property
    def first(self) -> str | None:
        """The first module or parameter that differs in this run (None: none, or none named)."""
        return next((c.module or c.parameter for c in self.report.comparisons if not c.passed), None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "run": self.label,
            "platform": self.where.get("platform", ""),
            "device_kind": self.where.get("device_kind", ""),
            "matmul_precision": self.where.get("matmul_precision", ""),
            "made": self.made,
            "passed": self.passed,
            "first": self.first,
            "problems": self.report.problems,
        }


@dataclasses.dataclass(frozen=True)
class Classification:
    """What the controlled re-runs of a check on an accelerator found: ``kind`` (one of ``KINDS``),
    ``text`` (the sentence printed before the verdict line) and ``runs`` (each run's own record)."""

    kind: str
    text: str
    runs: tuple[Run, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "text": self.text, "runs": [r.to_dict() for r in self.runs]}


def _device_words(where: dict[str, str]) -> str:
    kind = f" ({where['device_kind']})" if where.get("device_kind") else ""
    return f"a {where.get('platform', '').upper()}{kind}"


def _on(run: Run) -> str:
    """Where a run's side said it ran, in a phrase: ``a TPU (TPU v5 lite) at JAX's default matmul
    precision``, ``the host CPU``, or that it said nothing."""
    where = run.where
    if not where:
        return "nowhere it says (its side reports no platform)"
    if where.get("platform") == "cpu":
        return "the host CPU"
    return f"{_device_words(where)} at JAX's {level(where)} matmul precision"


def _first(run: Run) -> str:
    """Where a run first differed, in a phrase (its problems are the JSON report's)."""
    where = run.first
    return f"first at `{where}`" if where else "its problems are the JSON report's"


def _asked(runs: tuple[Run, ...] | list[Run]) -> str:
    """The as-asked run's place and precision, in a phrase."""
    return _on(runs[0])


def _not_made(*runs: Run) -> str:
    """Re-runs not made as asked, in a clause: what each asked, what its side says it ran."""
    said = "; ".join(
        f"the re-run asked {'at `highest`' if r.label == 'highest' else 'on the host CPU'} says it ran on "
        f"{_on(r)}"
        for r in runs
    )
    which = "it" if len(runs) == 1 else "they"
    return (
        f"{said}: not made as asked (the side does not report the placement asked for), so {which} "
        "confirm nothing and explain nothing"
    )


def precision(runs: list[Run]) -> Classification:
    at = level(runs[0].where)
    text = (
        f"the JAX side on {_asked(runs)} differs beyond what that arithmetic is modelled to permit "
        f"({_first(runs[0])}); re-run at `highest` (float32 products) on the same device it agrees: the "
        "device's reduced-precision products decided, not the port; the check is the `highest` run's. A "
        f"model run at the {at} precision there differs from float32 by that much"
    )
    return Classification("precision", text, tuple(runs))


def confirmed(runs: list[Run]) -> Classification:
    text = (
        f"the check passed with the JAX side on {_asked(runs)}, within what that arithmetic hides; re-run "
        "at `highest` (float32 products) on the same device it passes too, so the reduced precision hid "
        "no difference larger than float32's arithmetic there permits; the check is the `highest` run's"
    )
    return Classification("confirmed", text, tuple(runs))


def _at_highest(runs: list[Run]) -> str:
    """What the ``highest`` re-run found, in a clause (``runs[1]``: it failed, or was not made)."""
    run = runs[1]
    return f"at `highest` it differs ({_first(run)})" if run.made else _not_made(run)


def hidden(runs: list[Run]) -> Classification:
    text = (
        f"the check passed with the JAX side on {_asked(runs)}, within what that arithmetic hides; "
        f"{_at_highest(runs)}, and with the JAX side on the host CPU it differs too: a real difference "
        "of the port, smaller than the reduced precision can see; the verdict is the CPU run's"
    )
    return Classification("hidden", text, tuple(runs))


def device(runs: list[Run]) -> Classification:
    passed = runs[0].passed  # a pass below `highest`, re-run: the pass stands, the device named
    if len(runs) > 2 and not runs[1].made:
        found = f"{_not_made(runs[1])}; "
    else:
        run = runs[1] if len(runs) > 2 else runs[0]
        found = f"it differs at `highest` precision{'' if passed else ' too'} ({_first(run)}), and "
    text = (
        f"the JAX side on {_device_words(runs[0].where)}: {found}with the JAX side on the host CPU it "
        "agrees: the device's arithmetic decided (its float32 elementwise functions, or a product the "
        "code pins below float32 with an explicit `precision=`), not the port's math"
        + ("; the check as asked passed, and stands" if passed else "")
    )
    return Classification("device", text, tuple(runs))


def port(runs: list[Run]) -> Classification:
    text = (
        f"the difference found with the JAX side on {_device_words(runs[0].where)} stays with the JAX "
        "side on the host CPU: a real difference of the port, not the device's arithmetic; the verdict "
        "is the CPU run's"
    )
    return Classification("port", text, tuple(runs))


def unmade(runs: list[Run]) -> tuple[Report, Classification]:
    """Where the host CPU's re-run was not made as asked: a ``highest`` run that was made and failed is
    unexplained, FAILED with its verdict; else the as-asked verdict stands, unconfirmed (a pass) or
    unclassified (a failure). The report to end on, and what it says."""
    first = runs[0]
    said = _not_made(*(r for r in runs[1:] if not r.made))
    failed = next((r for r in runs[1:] if r.made and not r.passed), None) if first.passed else None
    if failed is not None:
        text = (
            f"the check passed with the JAX side on {_asked(runs)}; at `highest` it differs "
            f"({_first(failed)}), and {said}: the difference is not explained by the device; the verdict "
            "is the `highest` run's"
        )
        return failed.report, Classification("unclassified", text, tuple(runs))
    if first.passed:
        text = (
            f"the check passed with the JAX side on {_asked(runs)}, within what that arithmetic hides; "
            f"{said}: what the reduced precision hides was not looked at; the check as asked stands"
        )
        return first.report, Classification("unconfirmed", text, tuple(runs))
    text = (
        f"the JAX side on {_asked(runs)} differs ({_first(first)}); {said}: the failure is not "
        "classified, and the verdict is the as-asked run's"
    )
    return first.report, Classification("unclassified", text, tuple(runs))
