"""What the engine asks of a workload: a point to evaluate, and a judge per quantity.

The engine owns the lifecycle (load, guarded call, result and input checks, repeats, the report); a
workload owns what is specific to it behind this small protocol:

- ``EngineWorkload``: its name, the options it accepts (its case's knobs, as data: ``Knob``), how a
  spec becomes a backend (``resolve``), the candidates it checks by default, the ``Point`` of a case,
  a ``Judge`` for a quantity there, and the known answer of a case, when it has one.
- ``Judge``: how a backend computes the quantity (``evaluate``), how the reference estimates it
  (``reference``, with its error bars and what it cannot judge), and how a candidate is compared with
  it (``compare``: one ``Comparison`` per parameter, each with its named tolerance terms).

Every backend call a judge makes goes through the engine's ``Call`` (``call(fn, *args, convert=...)``),
so a re-run in the other precision, a localization or a classification re-run is guarded like the
first call.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeAlias, TypeVar, Union, runtime_checkable

import numpy as np

from crosscheck._backends.protocol import BackendSpec
from crosscheck._compare.constants import ALL_DTYPES
from crosscheck._compare.record import Comparison
from crosscheck._records import Oracle, Slack
from crosscheck._types import Loaded

if TYPE_CHECKING:
    from crosscheck._report.report import Report

Progress = Callable[[str, int, int], None]


def now() -> float:
    """The clock a check's wall time is counted on (``Options.started``, the model oracle's budget):
    seconds, monotonic."""
    return time.perf_counter()


#: How a worker process builds a workload again (``EngineWorkload.spec``, ``load_workload(spec)``): a
#: name or an import string, or plain data (the stack's knobs); None: it cannot be (an object given as
#: such). (``Union``: an alias evaluated when imported, on every Python this supports.)
WorkloadSpec: TypeAlias = Union[str, Mapping[str, Any], None]  # noqa: UP007


@dataclasses.dataclass(frozen=True)
class Knob:
    """One knob of a workload's case, as data: what the CLI's ``--NAME`` and ``[tool.crosscheck]`` read.

    Args:
        name: the keyword (``configure(name=...)``, ``point(name=...)``) and the option ``--name``.
        help: what it sets, for ``--help`` (without the default).
        type: how a command-line string becomes a value.
        default: its value when not given (shown in ``--help``).
        choices: the values it takes, when they are a short list.
    """

    name: str
    help: str
    type: Callable[[str], Any]
    default: Any
    choices: tuple[str, ...] | None = None


#: The knobs of every workload's point (``point(dtype=..., seed=...)``), with the run's defaults.
POINT_KNOBS = (
    Knob(
        "dtype",
        "float dtype of the inputs (bfloat16 and float16: gradients, one run at a time)",
        str,
        "float32",
        ALL_DTYPES,
    ),
    Knob("seed", "random seed", int, 0),
)


class Outcome(Protocol):
    """What a guarded call returns (``crosscheck._engine.call.Outcome``): a frozen dataclass, so that a
    judge makes a changed copy with ``dataclasses.replace``."""

    __dataclass_fields__: ClassVar[dict[str, Any]]

    @property
    def value(self) -> Any: ...
    @property
    def error(self) -> str | None: ...
    @property
    def seconds(self) -> float: ...
    @property
    def notes(self) -> dict[str, Any]: ...
    @property
    def ok(self) -> bool:
        """No error."""


class Quantity(Protocol):
    """What is cross-checked, as a workload reads it (``crosscheck._engine.quantity.Quantity``): its
    ``name``, as in ``--quantity``."""

    @property
    def name(self) -> str: ...


class Call(Protocol):
    """The engine's guarded call, bound to the point's arrays (``crosscheck._engine.caller.Caller``)."""

    def __call__(
        self, fn: Callable[..., Any], *args: Any, convert: str | None = None, **kwargs: Any
    ) -> Outcome:
        """``fn(*args, **kwargs)`` guarded; ``convert`` ``"array"`` or ``"arrays"`` checks the result."""

    def failure(self, error: str) -> Outcome:
        """An outcome that failed with ``error`` before any call."""

    def placed(self) -> contextlib.AbstractContextManager[None]:
        """The run's placement of each side in effect, as inside each call."""

    def on_host(self) -> contextlib.AbstractContextManager[None]:
        """Each side's calls on the host CPU while in effect (a re-run an accelerator cannot make)."""

    def cast(
        self, arrays: Mapping[str, np.ndarray], dtype: str, *, once: bool = False
    ) -> dict[str, np.ndarray]:
        """Fresh arrays for one call (``arrays`` with every float in ``dtype``): the next call handed them
        gets them without a second copy, and is checked against ``arrays`` cast the same way; ``once``:
        that call empties the dict when it returns, before its result is converted."""


@dataclasses.dataclass
class Point:
    """Named parameter arrays and inputs (the workload's dtype), plus what rebuilds them (``case``).

    ``extra`` holds further arrays a quantity passes to backends (the HVP direction ``v``); every
    array here is the engine's private copy, checked bit for bit after each backend call.
    """

    params: dict[str, np.ndarray]
    inputs: dict[str, np.ndarray]
    case: dict[str, Any]
    dtype: str
    extra: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)

    def arrays(self) -> dict[str, np.ndarray]:
        return {**self.params, **self.inputs, **self.extra}


@dataclasses.dataclass(frozen=True)
class Options:
    """How a run judges: the user's records as they were made (and checked), never unpacked, and the
    run's own choices.

    Attributes:
        slack: the user's ``Slack`` (None: none), added to every entry's tolerance (``slack_at``).
        oracle: how the reference judges (``Oracle``: its mode, directions and the model oracle's budget).
        plot: keep each comparison's per-entry arrays (``Comparison.arrays``), which a plot draws (the
            CLI's ``--plot``): the judge passes it to ``compare`` as ``keep``; without it no comparison
            keeps an array per entry.
        started: when the check started, on ``now``'s clock (the engine's, before the workload is
            loaded): the model oracle's budget counts the check's wall time from there (None: a judge
            made outside a check, whose budget counts the oracle's own seconds only).
    """

    slack: Slack | None = None
    oracle: Oracle = Oracle()  # noqa: RUF009 (frozen: one instance serves every run)
    strict: bool = False
    seed: int = 0
    explain: bool = False
    progress: Progress | None = None
    plot: bool = False
    started: float | None = None

    def slack_at(self, reference: np.ndarray) -> np.ndarray | float:
        """The user's ``atol + rtol * |reference|`` (0 without a slack)."""
        if self.slack is None:
            return 0.0
        return self.slack.atol + self.slack.rtol * np.abs(reference)


@dataclasses.dataclass(frozen=True)
class Reference:
    """The reference's answer: ``value`` per parameter (for the report; None when it only screened),
    the dtype it computed in, notes for its record, and the judge's own ``data``."""

    value: dict[str, np.ndarray] | None
    dtype: str | None
    notes: dict[str, Any]
    data: Any = None
    #: The reference backend's name in the report (set by the engine once it ran).
    name: str = ""


class Judge(Protocol):
    """One quantity of one workload at one point (see the module docstring)."""

    #: The backend method's signature, for messages (``"hvp(weights, x, v)"``).
    signature: str
    #: Notes a judge adds to a candidate's record, by candidate name (``{"rounding": "measured ..."}``).
    notes: dict[str, dict[str, Any]]

    def reference(self, backend: Loaded, call: Call) -> Outcome:
        """An ``Outcome`` whose value is a ``Reference`` (or whose error says why there is none)."""

    def evaluate(self, backend: Loaded, call: Call) -> Outcome:
        """An ``Outcome`` whose value is the backend's quantity, ``{parameter: array}``."""

    def compare(
        self, backend: Loaded, value: dict[str, np.ndarray], name: str, reference: Reference, call: Call
    ) -> list[Comparison]:
        """One ``Comparison`` per parameter; ``arrays["rounding"]`` bounds the candidate's own rounding
        (what a repeated call may differ by), ``{parameter: bound}``: an array, or an object that
        ``np.asarray`` makes one of when read (``measured.Bound``: nothing of a parameter's size kept)."""

    def extras(self, reference: Reference | None) -> dict[str, Any]:
        """Report fields of this quantity (``{"quantity": ..., "direction": ...}``), and what the
        workload adds to the report: ``"sections"`` (``crosscheck._report.report.Section``, printed
        before or after the table) and ``"verdicts"`` (a ``Verdict`` by candidate name)."""


class EngineWorkload(Protocol):
    """A workload as the engine runs it (``crosscheck.Stack``, a user's ``Workload``, a ``Port``); the
    engine reads its data, never sets it (read-only properties: a class attribute serves)."""

    @property
    def name(self) -> str: ...
    @property
    def spec(self) -> WorkloadSpec:
        """How a worker process builds it again (``load_workload(spec)``: a name, an import string or
        plain data); None: it cannot be (an object given as such)."""

    @property
    def takes(self) -> frozenset[str]:
        """The options of ``crosscheck.run`` (and the CLI) it takes beyond ``dtype`` and ``seed``, each
        set through ``configure`` (the stack's knobs; none for a workload that defines its own arrays)."""

    @property
    def case_knobs(self) -> tuple[Knob, ...]:
        """The knobs of its case as data, in the order its case record lists them: those it ``takes``
        and the point's (``POINT_KNOBS``). The CLI's case options and the sweep's checks are read from
        them."""

    @property
    def quantities(self) -> tuple[str, ...]:
        """The quantities it has a judge for (names of ``crosscheck._engine.quantity.QUANTITIES``)."""

    @property
    def explain(self) -> bool:
        """Whether its judge also localizes and classifies a disagreement (the report says so)."""

    def configure(self, **given: Any) -> EngineWorkload:
        """This workload with ``given`` (of what it ``takes``) set (``ValueError``: not a value of it)."""

    def defaults(self, reference: BackendSpec) -> list[BackendSpec]:
        """The candidates checked when the user names none."""

    def resolve(self, spec: BackendSpec) -> Loaded:
        """The backend for a spec (raises ``BackendUnavailable``, ``BackendBroken`` or ``ValueError``)."""

    def check_candidates(self, specs: Sequence[BackendSpec]) -> None:
        """Raise ``ValueError`` for a candidate list that cannot mean anything here."""

    def point(self, *, dtype: str, seed: int) -> Point:
        """The point of its case at ``dtype`` and ``seed`` (``ValueError`` when they are not values)."""

    def judge(self, quantity: Quantity, point: Point, options: Options) -> Judge:
        """The judge of ``quantity`` at ``point`` (raises ``ValueError`` when it has none)."""

    def known_answer(self, report: Report) -> str:
        """``"exact"`` when the gradients of ``report`` (a run of this workload) are its case's known
        answer exactly, else what is not; ``""`` when the case has none."""

    def engine(self, spec: str | None = None) -> EngineWorkload:
        """Itself: the engine's view of a workload is its own (``Declared``)."""


@runtime_checkable
class Declared(Protocol):
    """An engine's view of a workload (``Stack``, ``OwnArrays``), given where a workload is expected:
    its ``engine`` is itself. A declaration (``crosscheck.Workload``, ``Port``, ``Train``) is turned
    into its view by the registry (``registry.engine``), which imports both."""

    def engine(self, spec: str | None = None) -> EngineWorkload:
        """This view; ``spec``: the name or import string it was loaded by (a worker process loads it
        again by it), None for an object given as such."""


#: A view that defines its own arrays, as its own ``configure`` and ``engine`` return it.
_Own = TypeVar("_Own", bound="OwnArrays")


class OwnArrays:
    """What a workload that defines its own arrays (a user's ``Workload``, a ``Port``) says to the
    engine: it takes none of the stack's options, checks the gradient, and explains nothing more."""

    spec: WorkloadSpec = None
    takes: frozenset[str] = frozenset()
    case_knobs: tuple[Knob, ...] = POINT_KNOBS
    quantities: tuple[str, ...] = ("grad",)
    explain = False

    def known_answer(self, report: Report) -> str:
        return ""  # its arrays are its own: no answer is known in advance

    def configure(self: _Own, **given: Any) -> _Own:
        if given:  # the caller checks ``takes`` first and says which option does not apply
            raise ValueError(f"`{next(iter(given))}` does not apply to this workload.")
        return self

    def engine(self: _Own, spec: str | None = None) -> _Own:
        """Itself: it is the engine's view already (``Declared``)."""
        return self
