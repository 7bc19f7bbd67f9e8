"""The oracle's budget: ``--budget SECONDS`` (``crosscheck.run(budget=...)``).

A ``Clock`` counts the seconds and loss evaluations the oracle spends, batch by batch of evaluations (each
through the engine's guarded call): differencing, and probing each implementation's own loss for its noise
first (``oracle.precision``, ``PROBE_EVALUATIONS`` a loss, under its own label). Once the seconds reach the
budget, the next batch is refused (``OracleFailed`` with ``Clock.message``): the function being
differenced, and every one after it, is not differenced, so each tensor it would have judged is "not
checked" and the run fails, never passes (a check that did not happen must fail). A batch already started
finishes: the oracle overshoots its budget by at most one batch (a level of the stencil: a few evaluations
per direction, or two per entry). The report says how much was judged and what finishing would cost
(``Clock.summary``). Without a budget given, the default one (``DEFAULT_SECONDS``) holds: a long run
(a float64 check of a large model, differenced entry by entry or along many directions) ends with
what it judged and says that the default ended it, never an hour in silence; it is said only where it
ran out. The run's progress (``Options.progress``: the command line's bar on stderr) counts each
function's evaluations as they are made.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from crosscheck._workloads.model.oracle.entries import Guard, OracleFailed

_T = TypeVar("_T", bound=npt.ArrayLike)

#: The oracle's seconds at most when no budget is given: ten minutes, past the few minutes a healthy
#: tiny diffusers UNet's oracle takes (``docs/measurements/zoo.md``); ``--budget`` sets another.
DEFAULT_SECONDS = 600.0


@dataclasses.dataclass
class Clock:
    """Seconds and evaluations the oracle spent (``budget``: the most seconds it may, None: no limit);
    ``planned`` and ``done``: evaluations per function differenced, planned (the cost model) and made."""

    budget: float | None = None
    seconds: float = 0.0
    planned: dict[str, int] = dataclasses.field(default_factory=dict)
    done: dict[str, int] = dataclasses.field(default_factory=dict)
    ran_out: bool = False
    #: The budget is the default (``DEFAULT_SECONDS``), not one the user gave.
    default: bool = False

    @classmethod
    def given(cls, budget: float | None) -> Clock:
        """The clock of a run given ``budget`` seconds (None: the default budget)."""
        return cls(DEFAULT_SECONDS, default=True) if budget is None else cls(budget)

    @property
    def said(self) -> bool:
        """Whether the report speaks of the budget: one the user gave, or the default once it ran out."""
        return self.budget is not None and (self.ran_out or not self.default)

    @property
    def evaluations(self) -> int:
        return sum(self.done.values())

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
        return (
            f"the oracle's {which} ran out ({_seconds(self.seconds)}, {self.evaluations} loss evaluations "
            "made): not differenced"
        )

    def guard(
        self, guard: Guard, label: str, progress: Callable[[str, int, int], None] | None = None
    ) -> Guard:
        """``guard`` with the budget checked before each batch, and the batch's seconds counted;
        ``progress``: told after each batch of ``label``'s evaluations done of planned (a phase whose
        own loop reports none, the noise probe)."""

        def timed(thunk: Callable[[], _T]) -> _T:
            if self.budget is not None and self.seconds >= self.budget:
                self.ran_out = True
                raise OracleFailed(self.message())
            start = time.perf_counter()
            try:
                out = guard(thunk)
            finally:
                self.seconds += time.perf_counter() - start
            self.count(label, int(np.size(out)))  # a batch's losses, or the one at the point
            if progress is not None:
                done = self.done[label]
                progress(f"oracle: {label}{self.within()}", done, max(self.planned.get(label, 0), done))
            return out

        return timed

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
        if self.ran_out:
            out["to_finish"] = {
                "evaluations": left,
                "seconds": None if math.isnan(rate) else round(left * rate, 1),
            }
        return out


def line(budget: dict[str, Any]) -> str:
    """The report's line on the budget."""
    spent = f"{_seconds(budget['spent'])} spent in {budget['evaluations']} evaluations"
    default = " (the default)" if budget.get("default") else ""
    head = f"oracle budget: {budget['seconds']:g} s{default}, {spent}"
    if not budget["ran_out"]:
        return head + "; not exhausted"
    finish = budget["to_finish"]
    rough = "" if finish["seconds"] is None else f", {_more(finish['seconds'])} at this rate"
    return (
        f"{head}; it ran out: {budget['judged']} of {budget['parameters']} parameters judged, the others "
        f"not checked (failed); finishing needs at least {finish['evaluations']} more evaluations{rough} "
        "(a larger --budget)"
    )


def _seconds(seconds: float) -> str:
    """``0.012 s``, ``2.5 s``, ``41 s``: two significant digits, never a ``0.0 s`` that was spent."""
    return f"{seconds:.2g} s" if seconds < 10 else f"{seconds:.0f} s"


def _more(seconds: float) -> str:
    """How much longer finishing takes, in words a reader can use: ``under a second more`` rather than
    ``roughly 0 s more``."""
    return "under a second more" if seconds < 1 else f"roughly {_seconds(seconds)} more"
