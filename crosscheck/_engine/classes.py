"""The classes a check with a side on an accelerator (JAX's, or PyTorch's on CUDA) is classified into
(``classify``), and what each says (``Classification``), from the records of its runs (``runs.Run``)."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from crosscheck._compare.modelled import MODEL_FACTOR, MODEL_FLOOR_UNITS, worst
from crosscheck._engine.runs import Run, framework, level, who
from crosscheck._report.report import Report

#: The classes (``Classification.kind``): a failure's (``precision``, ``device``, ``port``), a pass
#: below ``highest`` (``confirmed``, ``hidden``, ``device``), a run as asked that differs beyond what its
#: reduced-precision products can make (``beyond``) or whose products could not be modelled
#: (``unmodelled``), a port whose device run is not shown to be the program its host CPU run ran
#: (``program``), and a classification whose re-runs were not made as asked (``unconfirmed``: a pass;
#: ``unclassified``: a failure).
KINDS = (
    "precision",
    "device",
    "port",
    "confirmed",
    "hidden",
    "beyond",
    "unmodelled",
    "program",
    "unconfirmed",
    "unclassified",
)


@dataclasses.dataclass(frozen=True)
class Classification:
    """What the controlled re-runs of a check on an accelerator found: ``kind`` (one of ``KINDS``),
    ``text`` (the sentence printed before the verdict line) and ``runs`` (each run's own record)."""

    kind: str
    text: str
    runs: tuple[Run, ...]
    #: What fails the check, where the classification itself does (a pass as asked whose difference the
    #: reduced precision cannot produce): one of the report's problems.
    problem: str = ""

    def to_dict(self) -> dict[str, Any]:
        found = {"kind": self.kind, "text": self.text, "runs": [r.to_dict() for r in self.runs]}
        return {**found, "problem": self.problem} if self.problem else found


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
    if framework(where) == "torch":
        return f"{_device_words(where)} with TF32 {'on' if level(where) != 'highest' else 'off'}"
    return f"{_device_words(where)} at JAX's {level(where)} matmul precision"


def _the(runs: list[Run]) -> str:
    """The side classified, in words: ``the JAX side`` or ``the PyTorch side`` (the as-asked run's)."""
    return f"the {who(runs[0].where)} side"


def _first(run: Run) -> str:
    """Where a run first differed, in a phrase (its problems are the JSON report's)."""
    where = run.first
    return f"first at `{where}`" if where else "its problems are the JSON report's"


def _asked(runs: list[Run]) -> str:
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


def _other_code(run: Run) -> str:
    """A ``highest`` re-run whose program differs from the run as asked, in a clause."""
    return (
        f"at `highest` the port traces another program ({'; '.join(run.differs)}): it confirms and "
        "explains nothing"
    )


def _at_highest(run: Run) -> str:
    """What the ``highest`` re-run found, in a clause (it did not confirm or explain the run as asked)."""
    if not run.made:
        return _not_made(run)
    if run.differs:
        return _other_code(run)
    return f"at `highest` it differs ({_first(run)})"


def _units(row: tuple[str, float, float]) -> str:
    """A parameter's median difference against the model's, in words."""
    name, asked, made = row
    return f"`{name}`: a median {asked:.3g} units against {made:.3g} modelled"


def _model(run: Run) -> str:
    """The device model of the run's products, in a phrase."""
    unit = float((run.model or {}).get("unit", 0.0))
    said = f"2^{math.log2(unit):.0f}" if unit > 0 and math.log2(unit).is_integer() else f"{unit:.3g}"
    return (
        f"the device's products, modelled on this case on the host (each float32 input rounded to the "
        f"device's unit, {said})"
    )


def _within(run: Run) -> str:
    """The as-asked run's difference from float32 against the device model, in a clause."""
    if run.model is None:
        return (
            f"the device's products were not modelled for this check ({run.unmodelled}), so its "
            "difference at the default precision is not bounded"
        )
    found = worst(run.model.get("parameters", {}))
    most = f" (most at {_units(found[0])})" if found else ""
    return f"its difference from float32 at the default precision is within what {_model(run)} make{most}"


def precision(runs: list[Run]) -> Classification:
    at = level(runs[0].where)
    text = (
        f"{_the(runs)} on {_asked(runs)} differs beyond what that arithmetic is modelled to permit "
        f"({_first(runs[0])}); re-run at `highest` (float32 products) on the same device it agrees, and "
        f"{_within(runs[0])}: the device's reduced-precision products decided, not the port; the check is "
        f"the `highest` run's. A model run at the {at} precision there differs from float32 by that much"
    )
    return Classification("precision", text, tuple(runs))


def confirmed(runs: list[Run]) -> Classification:
    text = (
        f"the check passed with {_the(runs)} on {_asked(runs)}, within what that arithmetic hides; re-run "
        "at `highest` (float32 products) on the same device it passes too, so the reduced precision hid "
        f"no difference larger than float32's arithmetic there permits, and {_within(runs[0])}; the check "
        "is the `highest` run's"
    )
    return Classification("confirmed", text, tuple(runs))


def beyond(runs: list[Run], over: list[tuple[str, float, float]]) -> tuple[Report, Classification]:
    """A ``highest`` re-run that agrees, where the as-asked run differs from float32 beyond what the
    device's products can make (``modelled.beyond``): a difference the reduced precision cannot explain,
    FAILED with the as-asked run's verdict and this problem."""
    first = runs[0]
    more = f" and {len(over) - 1} more" if len(over) > 1 else ""
    problem = (
        f"{_the(runs)} on {_asked(runs)} differs from float32 beyond what its reduced-precision products "
        f"can make ({_units(over[0])}{more}; permitted: {MODEL_FACTOR:g} x the model + "
        f"{MODEL_FLOOR_UNITS:g} units): a difference the reduced precision cannot explain"
    )
    text = (
        f"{problem}; re-run at `highest` on the same device it agrees, so the difference is made only at "
        f"the reduced precision, and is more than {_model(first)} make there; the verdict is the as-asked "
        "run's"
    )
    return first.report, Classification("beyond", text, tuple(runs), problem)


def unmodelled(runs: list[Run]) -> tuple[Report, Classification]:
    """A failure as asked that a ``highest`` re-run does not repeat, where the device's products could not
    be modelled: the difference is not shown to be the reduced precision's, FAILED as asked."""
    first = runs[0]
    text = (
        f"{_the(runs)} on {_asked(runs)} differs beyond what that arithmetic is modelled to permit "
        f"({_first(first)}); re-run at `highest` on the same device it agrees, but {_within(first)}: "
        "the difference is not shown to be the reduced precision's, and the verdict is the as-asked run's"
    )
    return first.report, Classification("unmodelled", text, tuple(runs))


def hidden(runs: list[Run]) -> Classification:
    text = (
        f"the check passed with {_the(runs)} on {_asked(runs)}, within what that arithmetic hides; "
        f"{_at_highest(runs[1])}, and with {_the(runs)} on the host CPU it differs too: a real difference "
        "of the port, smaller than the reduced precision can see; the verdict is the CPU run's"
    )
    return Classification("hidden", text, tuple(runs))


def device(runs: list[Run]) -> Classification:
    passed = runs[0].passed  # a pass below `highest`, re-run: the pass stands, the device named
    if len(runs) > 2 and (not runs[1].made or runs[1].differs):
        found = f"{_at_highest(runs[1])}; "
    else:
        run = runs[1] if len(runs) > 2 else runs[0]
        found = f"it differs at `highest` precision{'' if passed else ' too'} ({_first(run)}), and "
    text = (
        f"{_the(runs)} on {_device_words(runs[0].where)}: {found}with {_the(runs)} on the host CPU, the "
        "same program, it agrees: the device's arithmetic decided (its float32 elementwise functions, or "
        "a product the code pins below float32 with an explicit `precision=`), not the port's math"
        + ("; the check as asked passed, and stands" if passed else "")
    )
    return Classification("device", text, tuple(runs))


def port(runs: list[Run]) -> Classification:
    text = (
        f"the difference found with {_the(runs)} on {_device_words(runs[0].where)} stays with {_the(runs)} "
        "on the host CPU, the same program: a real difference of the port, not the device's "
        "arithmetic; the verdict is the CPU run's"
    )
    return Classification("port", text, tuple(runs))


def other_program(runs: list[Run]) -> tuple[Report, Classification]:
    """The host CPU's run is not shown to be the device's program (``runs.Run.same``): it clears and
    explains nothing, and the device's path is judged on the device's own runs alone (the run as asked
    and a ``highest`` re-run of the same program): FAILED with the first of them that fails, else the
    as-asked pass stands. The report to end on, and what it says."""
    first, cpu = runs[0], runs[-1]
    if cpu.differs:
        what = f"the port runs other code on the device ({'; '.join(cpu.differs)})"
    else:
        what = (
            f"the program {_the(runs)} ran on the device is not shown to be the one it ran on the host "
            "CPU (its backend does not say what it traced: `program()`)"
        )
    own = [r for r in runs[:-1] if r.made and not r.differs]
    failed = next((r for r in own if not r.passed), None)
    host = "passes" if cpu.passed else f"differs too ({_first(cpu)})"
    if failed is None:
        found = f"as asked it passes, within {_asked(runs)}'s arithmetic; the check as asked stands"
        report = first.report
    else:
        found = f"{'as asked' if failed is first else 'at `highest`'} it differs ({_first(failed)})"
        report = failed.report
    text = (
        f"{what}; its device path was judged on the device's own arithmetic alone: {found}. The run with "
        f"{_the(runs)} on the host CPU {host}, and clears and explains nothing"
    )
    return report, Classification("program", text, tuple(runs))


def unmade(runs: list[Run]) -> tuple[Report, Classification]:
    """Where the host CPU's re-run was not made as asked: a ``highest`` run that was made and failed is
    unexplained, FAILED with its verdict; else the as-asked verdict stands, unconfirmed (a pass) or
    unclassified (a failure). The report to end on, and what it says."""
    first = runs[0]
    said = _not_made(*(r for r in runs[1:] if not r.made))
    failed = next((r for r in runs[1:] if r.made and not r.passed), None) if first.passed else None
    if failed is not None:
        text = (
            f"the check passed with {_the(runs)} on {_asked(runs)}; at `highest` it differs "
            f"({_first(failed)}), and {said}: the difference is not explained by the device; the verdict "
            "is the `highest` run's"
        )
        return failed.report, Classification("unclassified", text, tuple(runs))
    if first.passed:
        text = (
            f"the check passed with {_the(runs)} on {_asked(runs)}, within what that arithmetic hides; "
            f"{said}: what the reduced precision hides was not looked at; the check as asked stands"
        )
        return first.report, Classification("unconfirmed", text, tuple(runs))
    text = (
        f"{_the(runs)} on {_asked(runs)} differs ({_first(first)}); {said}: the failure is not "
        "classified, and the verdict is the as-asked run's"
    )
    return first.report, Classification("unclassified", text, tuple(runs))
