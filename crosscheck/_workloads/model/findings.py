"""What the model judge finds, as records, and the judge as its helpers see it.

A ``Record`` per candidate (its comparisons, which question each answers, whether a gradient of zeros
would pass them, its float64 loss against the anchor's), the run's ``Findings`` (how the oracle
differenced, a record per candidate, the anchor, each zero tensor's ``ZeroCheck``) and ``Judging``: what
``reference``, ``groups``, ``zeros`` and ``summary`` read of the judge (its point, differencing, options,
shapes, findings, ``progress``, ``context`` and ``rounding``). They sit below those modules and the
judge, so that none of them imports the judge: the judge fills the records, ``summary`` reads them.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol

import numpy as np

from crosscheck._compare import terms
from crosscheck._compare.constants import UNIT_ROUNDOFF
from crosscheck._compare.record import Comparison
from crosscheck._types import Loaded
from crosscheck._workloads.model.compare import Context
from crosscheck._workloads.model.oracle.function import Differences, Differencing, Function, Skip
from crosscheck._workloads.model.rounding import Rounding
from crosscheck._workloads.protocol import Options, Point

#: The float64 losses at the point may differ by this many unit roundoffs of |loss| beyond their
#: measured rounding: float64's in a float64 check, float32's in a float32 (or 16-bit) one.
LOSS_FLOOR_ULPS = 64.0
EMPTY_ENTRY = "the check is empty: a gradient of zeros would pass every entry (the loss is flat)"


@dataclasses.dataclass(frozen=True)
class ZeroCheck:
    """One zero tensor along its directions of one side's own loss: ``status`` confirmed, refuted or
    not judged; ``derivative`` and ``error`` the oracle's largest directional derivative and its error
    bar; ``why`` for a tensor not judged."""

    side: str
    parameter: str
    status: str
    directions: int = 0
    derivative: float = 0.0
    error: float = 0.0
    why: str = ""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class Record:
    """What the judge found for one candidate."""

    name: str
    gradient: dict[str, np.ndarray]
    rounding: Rounding
    own: Differences | Skip | None = None
    comparisons: list[Comparison] = dataclasses.field(default_factory=list)
    zeros: dict[str, bool] = dataclasses.field(default_factory=dict)  # "question/parameter" -> passes
    loss: dict[str, Any] | None = None

    def add(self, found: list[Comparison], zeros: dict[str, bool], question: str = "same function") -> None:
        self.comparisons += found
        self.zeros.update({f"{question}/{k}": v for k, v in zeros.items()})

    def finish(self, found: list[Comparison]) -> list[Comparison]:
        """``found``, each marked ``empty`` (failed) when a gradient of zeros passes all of them, and
        failed with the diagnosis where the candidate computes below float32 precision."""
        found = self._excess(found)
        if not (self.zeros and all(self.zeros.values())):
            return found
        says = {e.parameter: f"{e.says(self.name, 'float32')}\n" for e in self.rounding.excess}
        marked = [
            c
            if c.status == "invalid"  # an excess keeps its diagnosis: it is why zeros pass
            else dataclasses.replace(
                c, passed=False, status="empty", message=says.get(c.parameter or "", "") + EMPTY_ENTRY
            )
            for c in found
        ]
        self.comparisons = [c for c in self.comparisons if all(c is not f for f in found)] + marked
        return marked

    def _excess(self, found: list[Comparison]) -> list[Comparison]:
        """A parameter computed below float32 precision fails, whatever its comparison found: its
        tolerance cannot be its own error (``rounding.Excess``)."""
        says = {e.parameter: e.says(self.name, "float32") for e in self.rounding.excess}
        if not says:
            return found
        marked = [
            dataclasses.replace(
                c, passed=False, status="mismatch", message=f"{says[c.parameter]}\n{c.message}"
            )
            if c.parameter in says and c.status != "invalid"
            else c
            for c in found
        ]
        self.comparisons = [c for c in self.comparisons if all(c is not f for f in found)] + marked
        return marked

    def nothing(self, shapes: dict, reference: str, why: str) -> list[Comparison]:
        found = [
            Comparison(
                backend=self.name,
                reference=reference,
                parameter=k,
                passed=False,
                status="invalid",
                total=int(np.prod(s)),
                message=f"parameter `{k}`: {why}",
                question="derivative",
            )
            for k, s in shapes.items()
        ]
        self.comparisons += found
        return found

    def loss_check(self, anchor: Function, own: Differences | Skip | None, dtype: str = "float64") -> None:
        """The float64 losses at the point, this candidate's against the anchor's, at the resolution of
        the check's ``dtype`` (``resolution``): a float32 check asks whether the two compute the same
        function to float32's precision, so a constant one side keeps in float32 and the other builds in
        float64 (a sinusoidal position table) is no difference there; a float64 check asks float64's."""
        if not isinstance(own, Differences) or own.function is anchor:
            return
        mine = own.function
        difference = abs(mine.value - anchor.value)
        rounding = mine.rounding + (anchor.rounding if anchor.owner is not None else mine.rounding)
        scale = max(abs(mine.value), abs(anchor.value))
        fine = terms.modelled(rounding) + terms.floor(scale, UNIT_ROUNDOFF["float64"], ulps=LOSS_FLOOR_ULPS)
        at = resolution(dtype)
        coarser = UNIT_ROUNDOFF[at] / UNIT_ROUNDOFF["float64"]  # a float64 rounding, as the dtype's
        tolerance = fine * coarser
        self.loss = {
            "value": mine.value,
            "against": anchor.label,
            "reference": anchor.value,
            "difference": difference,
            "tolerance": tolerance,
            "passed": bool(difference <= tolerance),
            "resolution": at,
            #: Whether they agree at float64's resolution too (a float32 constant on one side: not).
            "float64_passed": bool(difference <= fine),
            "float64_tolerance": fine,
        }


def resolution(dtype: str) -> str:
    """At which precision a ``dtype`` check compares the float64 losses: float64's in a float64 check,
    float32's otherwise (a 16-bit check's float32 re-run is its finest)."""
    return "float64" if dtype == "float64" else "float32"


@dataclasses.dataclass
class Findings:
    """What a judge found in a run, for the report's ``oracle`` section: how the oracle differenced
    (``differencing``, ``differentiates``), the parameters' shapes, a ``Record`` per candidate, the
    differences every candidate is compared with (``anchor``), whether the reference is the oracle (else
    a backend, whose gradient is ``reference_gradient``: the backend's own arrays, in its dtype, widened
    where used)."""

    differencing: Differencing
    differentiates: str
    shapes: dict[str, tuple[int, ...]]
    records: dict[str, Record] = dataclasses.field(default_factory=dict)
    anchor: Differences | None = None
    oracle: bool = False
    reference_gradient: dict[str, np.ndarray] | None = None
    #: A backend as reference: its name, and the oracle's zero checks (``zeros``), parameter -> side.
    reference_name: str = ""
    zero_checks: dict[str, dict[str, ZeroCheck]] = dataclasses.field(default_factory=dict)
    #: A port's parameters the loss does not reach (None: not known), and the ``unused`` patterns.
    unreached: list[str] | None = None
    unused: tuple[str, ...] = ()


class Judging(Protocol):
    """The model judge (``judge.GenericJudge``) as ``reference``, ``groups``, ``zeros`` and ``summary`` see
    it."""

    point: Point
    differencing: Differencing
    options: Options
    dtype: str
    shapes: dict[str, tuple[int, ...]]
    findings: Findings

    def progress(self, description: str, done: int, total: int) -> None:
        """Reports the oracle's progress (``Options.progress``, when there is one)."""

    def context(self, name: str, reference: str, question: str, function: Function) -> Context:
        """The comparison's context of candidate ``name`` against differences of ``function``."""

    def rounding(self, backend: Loaded, value: dict[str, np.ndarray], name: str, call: Any) -> Rounding:
        """The rounding of ``name``'s gradient ``value``, measured by its re-run (``rerun.rounding``)."""
