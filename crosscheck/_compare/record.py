"""The records of a comparison: a ``Tolerance`` (a sum of named terms), the ``Kinks`` that bear on each
entry, and the ``Comparison`` of one candidate against the reference (``compare`` builds it)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np


class Made:
    """A per-entry term made a block at a time, never whole (a measured rounding term of
    GPT-2's token embedding is 0.29 GiB): ``make`` (element-wise, a new float64 array) of ``source``'s
    entries. ``rows`` of the leading axis, ``at`` one entry, ``np.asarray`` the whole: each the numbers
    of ``make(source)`` there, since ``make`` is element-wise."""

    __slots__ = ("make", "source")

    def __init__(self, source: np.ndarray, make: Callable[[np.ndarray], np.ndarray]):
        self.source, self.make = source, make

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.source.shape)

    def rows(self, rows: slice) -> np.ndarray:
        """The leading axis's ``rows`` (a 0-d term: its one entry, as a row)."""
        return self.make(self.source.reshape(self.shape or (1,))[rows])

    def at(self, index: tuple[int, ...]) -> float:
        return float(self.make(np.array(self.source[index], ndmin=1))[0])

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        out = np.asarray(self.make(self.source))
        return out if dtype is None else out.astype(dtype, copy=False)


@dataclasses.dataclass(frozen=True)
class Tolerance:
    """Per-entry tolerance as a sum of named terms (each an array broadcastable to the gradient, or a
    ``Made`` of the gradient's shape)."""

    terms: dict[str, Any]

    def total(self) -> np.ndarray:
        total = np.zeros(())
        for term in self.terms.values():
            total = total + np.asarray(term, dtype=np.float64)
        return total

    def at(self, index: tuple[int, ...]) -> dict[str, float]:
        return {
            name: t.at(index) if isinstance(t, Made) else float(np.broadcast_to(t, self.shape)[index])
            for name, t in self.terms.items()
        }

    @property
    def shape(self) -> tuple[int, ...]:
        return np.broadcast_shapes(*(np.shape(t) for t in self.terms.values()))


@dataclasses.dataclass(frozen=True)
class Kinks:
    """How kinks (points where the function is not differentiable) bear on each entry.

    Attributes:
        unjudgeable: bool array, True where the entry cannot be judged.
        reason: object array of reason strings ("" where judgeable).
        kink: int array ``shape + (width,)``: the index of the kink responsible (-1 where none); the
            workload says what it indexes and how wide it is (the stack's ``(layer, row, unit)``).
        alternative: where one kink may legitimately flip, the reference on its other side (NaN
            elsewhere): such an entry passes when it matches either side.
    """

    unjudgeable: np.ndarray
    reason: np.ndarray
    kink: np.ndarray
    alternative: np.ndarray

    @classmethod
    def none(cls, shape: tuple[int, ...], width: int = 1) -> Kinks:
        """No kink bears on any entry (``width``: how wide a kink's index would be).

        The arrays are read-only views of one value each (``np.broadcast_to``): they hold no memory per
        entry, so "no kinks" for a model's every parameter costs nothing (a copy of them writes).
        """
        return cls(
            np.broadcast_to(np.zeros((), bool), shape),
            np.broadcast_to(np.array("", object), shape),
            np.broadcast_to(np.array(-1), shape + (width,)),
            np.broadcast_to(np.array(np.nan), shape),
        )

    @property
    def width(self) -> int:
        """How many numbers index one kink."""
        return int(self.kink.shape[-1])


@dataclasses.dataclass(frozen=True)
class Comparison:
    """The record of one candidate against the reference (see README, "JSON report"): one per candidate
    (and per parameter and question, for a workload), in ``Report.comparisons``.

    Example:
        >>> def zeros(weights, x):  # a wrong gradient
        ...     return np.zeros_like(weights)
        >>> report = crosscheck.run(layers=2, dim=4, batch=3, seed=1, backends=[zeros])
        >>> c = report.comparisons[0]
        >>> c.backend, c.reference, c.passed, c.mismatched, c.total
        ('zeros', 'numpy-fd', False, 23, 32)
        >>> print(c.message.splitlines()[0])
        Mismatched elements: 23 / 32 (71.9%)
    """

    backend: str
    reference: str
    passed: bool
    status: str
    total: int
    #: The parameter compared, when the workload names it in messages (a workload's ``w1``; a workload
    #: of one parameter may leave it unnamed).
    parameter: str | None = None
    #: Which question a comparison answers, where its workload asks two: "derivative" (the
    #: candidate's gradient against differences of its own loss) or "same function" (against another
    #: function's answer); None where there is one question.
    question: str | None = None
    #: What the reference value is, in words ("differences of `torch`'s own float64 loss").
    against: str = ""
    #: The module whose output the row compares, where it compares one rather than a parameter's
    #: gradient (a port's ``conv1 (output)`` row: ``conv1``; ``""``: the model's own output); None for
    #: a parameter's row.
    module: str | None = None
    #: What each axis of an index means (the stack's ``["layer", "row", "col"]``); None: unnamed axes,
    #: an index is then written as a Python tuple (``(0, 7)``) and plotted as "axis 0", "axis 1".
    index_names: list[str] | None = None
    mismatched: int = 0
    judged: int = 0
    unjudgeable: int = 0
    two_sided: int = 0
    coverage: str = "every entry"
    screening: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    #: One row per index of the leading axis, where the workload asks for that split (``compare``'s
    #: ``split``, the name of that axis: the stack's ``"layer"``, whose JSON key this is).
    per_layer: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    worst_entries: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    forward: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    classification: dict[str, Any] = dataclasses.field(default_factory=dict)
    #: Per-entry arrays for plots (``ratio``, ``unjudgeable``, ``two_sided``: 10 bytes an entry per
    #: candidate, to the end of the run), only in a run that asks for a plot (``compare``'s ``keep``,
    #: from ``Options.plot``); not part of the JSON.
    arrays: dict[str, Any] = dataclasses.field(default_factory=dict, repr=False, compare=False)
    unjudgeable_reasons: dict[str, int] = dataclasses.field(default_factory=dict)
    kinks: list[list[int]] = dataclasses.field(default_factory=list)
    max_abs_diff: float | None = None
    max_abs_diff_index: tuple[int, ...] | None = None
    max_rel_diff: float | None = None
    max_rel_diff_index: tuple[int, ...] | None = None
    worst_index: tuple[int, ...] | None = None
    worst_ratio: float | None = None
    worst_terms: dict[str, float] | None = None
    worst_values: dict[str, float] | None = None
    decided_by: str | None = None
    tolerance_sources: dict[str, str] = dataclasses.field(default_factory=dict)
    message: str = ""

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(dataclasses.replace(self, arrays={}))
        del out["arrays"]
        for key, value in out.items():
            if isinstance(value, tuple):
                out[key] = list(value)
        return out
