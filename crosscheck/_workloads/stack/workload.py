"""The ReLU stack as the engine runs it: ``load_workload("stack")`` (the default workload).

Its point is a ``Case`` (generated arrays) or the user's own ``weights`` and ``x``; its backends take
``grad(weights, x)`` (and ``hvp(weights, x, v)``); its judges are ``judge.StackGradJudge`` and
``hvp_judge.StackHvpJudge``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from crosscheck._backends import DEFAULTS, ORACLE, load_backend
from crosscheck._workloads.protocol import Options, Point
from crosscheck._workloads.stack.case import Case, check_inputs, make_inputs

DESCRIPTION = "the eight-layer ReLU stack: y = relu(y @ W_k), loss sum(y_L ** 2) (the default)"


class StackWorkload:
    """The eight-layer ReLU stack (any ``layers``, ``batch``, ``dim``)."""

    name = "stack"
    description = DESCRIPTION
    #: False: its arrays come from the case options (``layers``, ``dim``, ...) or the user's own.
    own_arrays = False

    def defaults(self, reference: Any) -> list[Any]:
        return [b for b in DEFAULTS if b != reference]

    def resolve(self, spec: Any) -> Any:
        return load_backend(spec)

    def check_candidates(self, specs: Sequence[Any]) -> None:
        return None

    def point(self, given: Mapping[str, Any]) -> Point:
        """The case's arrays (generated, or the user's ``weights`` and ``x``, copied)."""
        weights, x = given.get("weights"), given.get("x")
        if (weights is None) != (x is None):
            raise ValueError("`weights` and `x` must be given together or not at all.")
        if weights is None:
            fields = ("layers", "batch", "dim", "dtype", "seed", "init", "scale")
            case = Case(**{k: given[k] for k in fields if given.get(k) is not None})
            weights, x = make_inputs(case)
            record = case.to_dict()
        else:
            weights, x = (_private(a) for a in check_inputs(weights, x))
            record = _user_case(weights, x)
        return Point({"weights": weights}, {"x": x}, record, weights.dtype.name)

    def memory(self, given: Mapping[str, Any], candidates: Sequence[Any]) -> dict[str, int]:
        """Bytes the case ``given`` (``crosscheck.run``'s keywords) needs, by part (``size.estimate``);
        empty when its sizes are not sizes (``point`` then says why)."""
        from crosscheck._workloads.stack.size import FRAMEWORKS, case_sizes, estimate

        sizes = case_sizes(given)
        if not sizes:
            return {}
        candidates = candidates or self.defaults(ORACLE)  # none named: the built-ins
        frameworks = sum(isinstance(c, str) and c.split("-")[0] in FRAMEWORKS for c in candidates)
        options = {k: given[k] for k in ("quantity", "oracle_mode", "directions", "explain") if k in given}
        if not isinstance(options.get("directions", 4), int):
            options.pop("directions")
        return estimate(**sizes, **options, candidates=len(candidates), frameworks=frameworks)

    def judge(self, quantity: Any, point: Point, options: Options) -> Any:
        from crosscheck._workloads.stack.judge.grad import StackGradJudge
        from crosscheck._workloads.stack.judge.hvp import StackHvpJudge

        judges = {"grad": StackGradJudge, "hvp": StackHvpJudge}
        return judges[quantity.name](point, options)


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


STACK = StackWorkload()
