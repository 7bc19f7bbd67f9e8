"""The oracle's budget: ``--budget SECONDS`` (``crosscheck.run(budget=...)``), the check's wall time.

A ``Clock`` counts the seconds and loss evaluations the oracle spends, batch by batch of evaluations (each
through the engine's guarded call): differencing, and probing each implementation's own loss for its noise
first (``oracle.precision``, ``PROBE_EVALUATIONS`` a loss, under its own label). In a check
(``Clock.started``: when it started, ``Options.started``) the budget is the check's wall time as its user
sees it, not the oracle's alone: the work around the oracle (loading the workload, each side's module
captures and its re-runs for rounding, the candidates' gradients, the localisation of a difference)
counts too. The oracle keeps back, for the work that follows its last batch, as much as that other work
took so far, at most ``RESERVE_SHARE`` of the budget: a batch is refused once the check's seconds and
that reserve reach the budget (``Clock.spent``). Refused (``OracleFailed`` with ``Clock.message``), the
function being differenced, and every one after it, is not differenced, so each tensor it would have
judged is "not checked" and the run fails, never passes (a check that did not happen must fail). A batch
already started finishes: the check ends within its budget plus one batch (a level of the stencil: a few
evaluations per direction, or two per entry), plus what the work after the oracle takes beyond its
reserve. The report says how much was judged and what finishing would cost (``Clock.summary``). Without
a budget given, the default one (``DEFAULT_SECONDS``) holds: a long run (a float64 check of a large
model, differenced entry by entry or along many directions) ends with what it judged and says that the
default ended it, never an hour in silence; it is said only where it ran out. The run's progress
(``Options.progress``: the command line's bar on stderr) counts each function's evaluations as they are
made. A clock without a start (an oracle used outside a check) counts the oracle's own seconds only.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from crosscheck._workloads import protocol
from crosscheck._workloads.model.oracle.entries import Guard, OracleFailed

_T = TypeVar("_T", bound=npt.ArrayLike)

#: The check's seconds at most when no budget is given: ten minutes, past the few minutes a healthy
#: tiny diffusers UNet's check takes with the default reference (``docs/measurements/zoo.md``);
#: ``--budget`` sets another.
DEFAULT_SECONDS = 600.0

#: The oracle keeps back for the work after its last batch as much as the check's other work took so
#: far, at most this share of the budget: that work (the next candidate's gradient and its re-runs for
#: rounding, the localisation of a difference) is of the kind already done before it.
RESERVE_SHARE = 0.25


@dataclasses.dataclass
class Clock:
    """Seconds and evaluations the oracle spent (``budget``: the most seconds the check may, None: no
    limit); ``planned`` and ``done``: evaluations per function differenced, planned (the cost model) and
    made; ``started``: when the check started (``protocol.now``; None: the oracle's own seconds only)."""

    budget: float | None = None
    seconds: float = 0.0
    planned: dict[str, int] = dataclasses.field(default_factory=dict)
    done: dict[str, int] = dataclasses.field(default_factory=dict)
    ran_out: bool = False
    #: The budget is the default (``DEFAULT_SECONDS``), not one the user gave.
    default: bool = False
    started: float | None = None
    #: The check's wall seconds and its other work's when the budget ran out (None: it did not).
    stopped: tuple[float, float] | None = None

    @classmethod
    def given(cls, budget: float | None, started: float | None = None) -> Clock:
        """The clock of a run given ``budget`` seconds (None: the default budget), started at
        ``started``."""
        if budget is None:
            return cls(DEFAULT_SECONDS, default=True, started=started)
        return cls(budget, started=started)

    @property
    def said(self) -> bool:
        """Whether the report speaks of the budget: one the user gave, or the default once it ran out."""
        return self.budget is not None and (self.ran_out or not self.default)

    @property
    def evaluations(self) -> int:
        return sum(self.done.values())

    def wall(self) -> float:
        """The check's seconds so far (the oracle's own without a start)."""
        return self.seconds if self.started is None else protocol.now() - self.started

    def other(self) -> float:
        """The check's seconds outside the oracle's batches so far."""
        return max(self.wall() - self.seconds, 0.0)

    def spent(self) -> float:
        """What the budget has been spent on: the check's seconds, and the reserve kept back for the work
        after the oracle (``RESERVE_SHARE``)."""
        if self.started is None or self.budget is None:
            return self.seconds
        return self.wall() + min(self.other(), RESERVE_SHARE * self.budget)

    def within(self) -> str:
        """For a progress bar's label: the budget the run keeps to (the default one said as such)."""
        if self.budget is None:
            return ""
        return f" (budget {self.budget:g} s{', the default' if self.default else ''})"

    def message(self) -> str:
        which = (
            f"default budget of {self.budget:g} s (--budget SECONDS for more)"
            if self.default
            else (f"budget of {self.budget:g} s")
        )
        other = ""
        if self.started is not None and self.stopped is not None:
            wall, rest = self.stopped
            kept = min(rest, RESERVE_SHARE * self.budget) if self.budget is not None else 0.0
            other = (
                f"; the check's {_seconds(wall)} so far, {_seconds(rest)} of it outside the oracle, and "
                f"{_seconds(kept)} kept back for the work after it"
            )
        return (
            f"the oracle's {which} ran out ({_seconds(self.seconds)}, {self.evaluations} loss evaluations "
            f"made{other}): not differenced"
        )

    def guard(
        self, guard: Guard, label: str, progress: Callable[[str, int, int], None] | None = None
    ) -> Guard:
        """``guard`` with the budget checked before each batch, and the batch's seconds counted;
        ``progress``: told after each batch of ``label``'s evaluations done of planned (a phase whose
        own loop reports none, the noise probe)."""

        def timed(thunk: Callable[[], _T]) -> _T:
            self.check()
            start = protocol.now()
            try:
                out = guard(thunk)
            finally:
                self.seconds += protocol.now() - start
            self.count(label, int(np.size(out)))  # a batch's losses, or the one at the point
            if progress is not None:
                done = self.done[label]
                progress(f"oracle: {label}{self.within()}", done, max(self.planned.get(label, 0), done))
            return out

        return timed

    def check(self) -> None:
        """Refuse the next batch (``OracleFailed``) once the budget is spent (``spent``); once refused, every
        later batch is too."""
        if self.budget is None:
            return
        if not self.ran_out and self.spent() >= self.budget:
            self.ran_out, self.stopped = True, (self.wall(), self.other())
        if self.ran_out:
            raise OracleFailed(self.message())

    def plan(self, label: str, evaluations: int) -> None:
        """``label``'s differences are planned to cost ``evaluations`` more."""
        self.planned[label] = self.planned.get(label, 0) + evaluations

    def count(self, label: str, evaluations: int) -> None:
        self.done[label] = self.done.get(label, 0) + evaluations

    def summary(self, judged: int, total: int) -> dict[str, Any]:
        """The report's ``oracle.budget``: the budget, what it bought (``judged`` of ``total``
        parameters), and what finishing would cost at the rate measured."""
        left = sum(max(p - self.done.get(k, 0), 0) for k, p in self.planned.items())
        rate = self.seconds / self.evaluations if self.evaluations else math.nan
        out: dict[str, Any] = {
            "seconds": self.budget,
            "spent": round(self.seconds, 3),
            "evaluations": self.evaluations,
            "ran_out": self.ran_out,
            "default": self.default,
            "judged": judged,
            "parameters": total,
        }
        if self.started is not None:  # the check's wall time, and its work outside the oracle
            out["wall"], out["other"] = round(self.wall(), 3), round(self.other(), 3)
        if self.ran_out:
            finish = None if math.isnan(rate) else left * rate
            out["to_finish"] = {"evaluations": left, "seconds": None if finish is None else round(finish, 1)}
            if finish is not None and self.started is not None:
                out["to_finish"]["budget"] = _needed(self.wall() + finish, self.other())
        return out


def _needed(seconds: float, other: float) -> float:
    """The budget a check of ``seconds`` of wall time, ``other`` of them outside the oracle, keeps to:
    its seconds and the reserve kept back (``Clock.spent``), rounded up."""
    needed = min(seconds + other, seconds / (1 - RESERVE_SHARE))
    return float(math.ceil(needed / 10) * 10 if needed >= 100 else math.ceil(needed))


def line(budget: dict[str, Any]) -> str:
    """The report's line on the budget."""
    spent = f"{_seconds(budget['spent'])} spent in {budget['evaluations']} evaluations"
    default = " (the default)" if budget.get("default") else ""
    head = f"oracle budget: {budget['seconds']:g} s{default}, {spent}"
    if "other" in budget:
        head += f", {_seconds(budget['other'])} in the check's other work (the budget counts both)"
    if not budget["ran_out"]:
        return head + "; not exhausted"
    finish = budget["to_finish"]
    rough = "" if finish["seconds"] is None else f", {_more(finish['seconds'])} at this rate"
    larger = f"--budget {finish['budget']:g} or more" if "budget" in finish else "a larger --budget"
    return (
        f"{head}; it ran out: {budget['judged']} of {budget['parameters']} parameters judged, the others "
        f"not checked (failed); finishing needs at least {finish['evaluations']} more evaluations{rough} "
        f"({larger})"
    )


def _seconds(seconds: float) -> str:
    """``0.012 s``, ``2.5 s``, ``41 s``: two significant digits, never a ``0.0 s`` that was spent."""
    return f"{seconds:.2g} s" if seconds < 10 else f"{seconds:.0f} s"


def _more(seconds: float) -> str:
    """How much longer finishing takes, in words a reader can use: ``under a second more`` rather than
    ``roughly 0 s more``."""
    return "under a second more" if seconds < 1 else f"roughly {_seconds(seconds)} more"
