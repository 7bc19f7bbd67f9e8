"""The ReLU stack, a workload like the others: ``crosscheck.Stack`` (the default workload).

A ``Stack`` owns its knobs (``layers``, ``batch``, ``dim``, ``init``, ``scale``; ``explain``, its
localization) or the user's own arrays (``Stack.from_arrays``); the run's ``dtype`` and ``seed`` make
its point (a ``Case``). Its backends take ``grad(weights, x)`` (and ``hvp(weights, x, v)``); its judges
are ``judge.grad.StackGradJudge`` and ``judge.hvp.StackHvpJudge``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from crosscheck._backends import DEFAULTS, ORACLE, load_backend
from crosscheck._backends.protocol import Backend, BackendSpec
from crosscheck._workloads.protocol import POINT_KNOBS, Judge, Options, Point, Quantity
from crosscheck._workloads.stack.case import KNOBS, Case, check_inputs, make_inputs

if TYPE_CHECKING:
    from crosscheck._report.report import Report

DESCRIPTION = "the eight-layer ReLU stack: y = relu(y @ W_k), loss sum(y_L ** 2) (the default)"
#: The knobs of a generated stack (its case's, less the point's), with their defaults (``Case``'s).
SHAPE = {knob.name: knob.default for knob in KNOBS if knob not in POINT_KNOBS}


class Stack:
    """The ReLU stack ``y = relu(y @ W_k)``, ``loss = sum(y_L ** 2)``: generated from its knobs and the
    run's ``dtype`` and ``seed``, or made of your own arrays (``Stack.from_arrays``).

    Args:
        layers: number of layers ``L`` (the leading axis of ``weights``).
        batch: rows ``N`` of ``x``.
        dim: width ``d``.
        init: how the arrays are drawn: ``"gaussian"``, ``"identity"``, ``"integer"`` or ``"nearzero"``
            (see ``Case``).
        scale: factor applied to ``x``.
        explain: also localize a disagreement (forward activations layer by layer) and classify it.

    Raises:
        TypeError, ValueError: a knob that is not one (the message names it and says what it takes).

    Example:
        >>> import crosscheck
        >>> stack = crosscheck.Stack(layers=3, dim=4)
        >>> stack.knobs["layers"], stack.knobs["dim"]
        (3, 4)
        >>> report = crosscheck.check(stack, backends=["jax", "torch"])  # doctest: +SKIP
    """

    name = "stack"
    description = DESCRIPTION
    #: The quantities it has a judge for.
    quantities = ("grad", "hvp")
    #: The knobs of its case as data (``case.KNOBS``): what the CLI's case options and the sweep's
    #: checks read, names, types, defaults and choices.
    case_knobs = KNOBS

    def __init__(
        self,
        *,
        layers: int = 8,
        batch: int = 8,
        dim: int = 16,
        init: str = "gaussian",
        scale: float = 1.0,
        explain: bool = False,
    ) -> None:
        shape = Case(layers=layers, batch=batch, dim=dim, init=init, scale=scale)  # validates
        self._shape: dict[str, Any] = {k: getattr(shape, k) for k in SHAPE}
        self._arrays: tuple[np.ndarray, np.ndarray] | None = None
        self.explain = bool(explain)

    @classmethod
    def from_arrays(cls, weights: Any, x: Any, *, explain: bool = False) -> Stack:
        """The stack over your own arrays, copied (no backend ever holds yours).

        Args:
            weights: ``(L, d, d)``, float32 or float64.
            x: ``(N, d)``, the same dtype.
            explain: as for ``Stack``.

        Raises:
            ValueError: wrong ranks or shapes, another dtype, empty or non-finite arrays.

        Example:
            >>> import numpy as np, crosscheck
            >>> stack = crosscheck.Stack.from_arrays(np.ones((2, 3, 3)), np.ones((4, 3)))
            >>> stack.knobs["layers"], stack.knobs["batch"]
            (2, 4)
        """
        weights, x = (_private(a) for a in check_inputs(weights, x))
        stack = cls(layers=weights.shape[0], batch=x.shape[0], dim=x.shape[1], explain=explain)
        stack._arrays = (weights, x)
        return stack

    @property
    def knobs(self) -> dict[str, Any]:
        """Its knobs (the shape of your arrays, for ``from_arrays``), as ``Stack(**knobs)`` takes them."""
        return {**self._shape, "explain": self.explain}

    #: What ``crosscheck.run`` and the CLI may set (``configure``): its knobs, or your arrays.
    takes = frozenset({*SHAPE, "explain", "weights", "x"})

    def configure(self, **given: Any) -> Stack:
        """This stack with ``given`` (of what it ``takes``) changed (``weights`` with ``x``: your arrays,
        which determine the case, so the other knobs then do not apply)."""
        weights, x = given.pop("weights", None), given.pop("x", None)
        if (weights is None) != (x is None):
            raise ValueError("`weights` and `x` must be given together or not at all.")
        explain = given.pop("explain", self.explain)
        if weights is not None:
            return Stack.from_arrays(weights, x, explain=explain)
        if self._arrays is not None and not given:
            return Stack.from_arrays(*self._arrays, explain=explain)
        return Stack(**{**self._shape, **given}, explain=explain)

    @property
    def spec(self) -> dict[str, Any]:
        """How a worker process builds it again (``load_workload(spec)``): plain data. A worker resolves
        backends only (the arrays travel with each call), so your arrays are described by their shape."""
        return {"workload": self.name, **self.knobs}

    def defaults(self, reference: BackendSpec) -> list[BackendSpec]:
        return [b for b in DEFAULTS if b != reference]

    def resolve(self, spec: BackendSpec) -> Backend:
        return load_backend(spec)

    def check_candidates(self, specs: Sequence[BackendSpec]) -> None:
        return None

    def point(self, *, dtype: str, seed: int) -> Point:
        """The case's arrays: generated from the knobs, ``dtype`` and ``seed``, or your own (private
        copies, their dtype theirs)."""
        if self._arrays is not None:
            weights, x = (a.copy() for a in self._arrays)
            record = _user_case(weights, x)
        else:
            case = Case(**self._shape, dtype=dtype, seed=seed)
            weights, x = make_inputs(case)
            record = case.to_dict()
        return Point({"weights": weights}, {"x": x}, record, weights.dtype.name)

    def memory(
        self, *, dtype: str, quantity: str, options: Options, candidates: Sequence[Any]
    ) -> dict[str, int]:
        """Bytes the case needs, by part (``size.estimate``), before anything is allocated."""
        from crosscheck._backends import FRAMEWORKS
        from crosscheck._workloads.stack.size import estimate

        if self._arrays is not None:
            dtype = self._arrays[0].dtype.name
        candidates = candidates or self.defaults(ORACLE)  # none named: the built-ins
        frameworks = sum(isinstance(c, str) and c.split("-")[0] in FRAMEWORKS for c in candidates)
        sizes = {k: self._shape[k] for k in ("layers", "batch", "dim")}
        return estimate(
            **sizes,
            dtype=dtype,
            quantity=quantity,
            oracle_mode=options.oracle.mode,
            directions=options.oracle.directions,
            explain=self.explain,
            candidates=len(candidates),
            frameworks=frameworks,
        )

    def judge(self, quantity: Quantity, point: Point, options: Options) -> Judge:
        from crosscheck._workloads.stack.judge.grad import StackGradJudge
        from crosscheck._workloads.stack.judge.hvp import StackHvpJudge

        judges: dict[str, Callable[[Point, Options], Judge]] = {"grad": StackGradJudge, "hvp": StackHvpJudge}
        return judges[quantity.name](point, options)

    def known_answer(self, report: Report) -> str:
        """``"exact"`` when every gradient of ``report`` is its case's known answer exactly (identity
        weights, ``x`` all ones: ``2 * N`` everywhere), else what is not; ``""`` when it has none."""
        from crosscheck._workloads.stack.matrix import check_known

        return check_known(report)

    def engine(self, spec: str | None = None) -> Stack:
        """Itself: the stack is the engine's view of itself."""
        return self

    @staticmethod
    def ci_cases() -> list[dict[str, Any]]:
        """The built-in CI matrix (``crosscheck sweep`` without a matrix of its own): case records of
        known answers, random shapes and seeds, exact zeros and near-kinks (``matrix.CASES``)."""
        from crosscheck._workloads.stack import matrix

        return [case.to_dict() for case in matrix.CASES]

    def __repr__(self) -> str:
        knobs = ", ".join(f"{k}={v!r}" for k, v in self.knobs.items())
        return f"Stack.from_arrays({knobs})" if self._arrays is not None else f"Stack({knobs})"


#: The default workload (``load_workload(None)``, ``load_workload("stack")``); a ``Stack`` never changes
#: (``configure`` makes another), so one serves every run.
DEFAULT = Stack()


def from_spec(spec: Mapping[str, Any]) -> Stack:
    """The ``Stack`` of a spec (``Stack.spec``), as a worker process rebuilds it."""
    return Stack(**{k: v for k, v in spec.items() if k != "workload"})


def _private(array: np.ndarray) -> np.ndarray:
    """A C-contiguous copy in native byte order: no backend ever holds the caller's array."""
    return np.array(array, dtype=array.dtype.name, order="C", copy=True)


def _user_case(weights: np.ndarray, x: np.ndarray) -> dict[str, Any]:
    return {
        "source": "user arrays",
        "layers": weights.shape[0],
        "batch": x.shape[0],
        "dim": x.shape[1],
        "dtype": weights.dtype.name,
        "weights_sha256": hashlib.sha256(weights.tobytes()).hexdigest(),
        "x_sha256": hashlib.sha256(x.tobytes()).hexdigest(),
    }
