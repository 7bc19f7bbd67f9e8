"""The loss at many points in one call: the oracle's batched evaluations, where an implementation can.

An implementation's adapter may offer ``losses(params, inputs, batched)``: its float64 loss at ``k``
points in one call, the tensors named in ``batched`` carrying a leading axis of ``k`` (one value per
point), the others shared (JAX: one jitted float64 function, ``jax.vmap`` over the points, compiled
once per set of batched tensors and number of points; PyTorch: ``torch.func.vmap`` over the module's
``functional_call``, without autograd). ``Batched`` wraps an implementation's loss with it: the oracle's
``Evaluator`` then stacks the points of each batch (at most ``POINTS`` a call, ``BYTES`` of stacked
tensors) and makes one call where it made ``k``. The points are the same as one by one (each built by
the same edit of the same float64 arrays), so are the error bars; only the losses' rounding can differ
(a batched matrix product may sum in another order), far below any error bar.

A model that cannot be batched (``vmap`` refuses an operation: a data-dependent branch, ``.item()``, an
in-place write) falls back to one call a point, for the rest of the run, and the report says so and why
(``Batched.fallback``). So does a batch whose losses come back as anything but ``k`` numbers.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from crosscheck._errors import describe

#: Points in one batched call at most, and bytes of stacked tensors per call at most.
POINTS = 8
BYTES = 2**27
#: Batched only where the oracle plans at least this many evaluations of a function: below, compiling
#: the batched loss (JAX: once per set of batched tensors) costs more than the calls it saves.
FROM_EVALUATIONS = 256

#: ``many(params, batched) -> k losses``: the tensors named in ``batched`` have a leading axis of k.
Many = Callable[[dict[str, np.ndarray], tuple[str, ...]], Any]


class Batched:
    """A float64 loss of the parameters (``one(params) -> float``) that can also be evaluated at many
    points in one call (``many``); ``fallback`` says why it no longer is (None while it is)."""

    def __init__(self, one: Callable[[dict[str, np.ndarray]], Any], many: Many) -> None:
        self.one, self.many = one, many
        self.fallback: str | None = None
        self.calls = self.points = 0

    def __call__(self, params: dict[str, np.ndarray]) -> object:
        return self.one(params)

    def note(self) -> str:
        """What the report says of this loss's evaluations."""
        if self.fallback is not None:
            return f"one call a point: it cannot be batched ({self.fallback})"
        if not self.calls:
            return "one call a point (too few evaluations for batching to pay)"
        return f"batched: {self.points} points in {self.calls} calls"

    def evaluate(
        self,
        shape: tuple[int, ...],
        perturb: Callable[[tuple[int, ...]], Callable[[], None]],
        work: dict[str, np.ndarray],
        views: dict[str, np.ndarray],
        varying: Sequence[str],
        expected: int,
    ) -> np.ndarray:
        """The loss at every point ``pos`` of ``shape`` (``perturb(pos)`` edits ``work``, the tensors
        ``varying`` among them, and returns what puts it back), in batches when the evaluations
        ``expected`` of this function pay for them (``FROM_EVALUATIONS``); one by one after a fallback."""
        positions = list(np.ndindex(shape))
        out = np.empty(shape)
        per = max(1, min(POINTS, BYTES // max(1, sum(work[k].nbytes for k in varying))))
        wanted = expected >= FROM_EVALUATIONS and per > 1  # one point a call: nothing to batch
        for start in range(0, len(positions), per):
            part = positions[start : start + per]
            batch = wanted and self.fallback is None
            found = self._batch(part, perturb, work, views, varying) if batch else None
            values = [_one(self.one, pos, perturb, views) for pos in part] if found is None else list(found)
            for pos, value in zip(part, values, strict=True):
                out[pos] = value
        return out

    def _batch(self, part, perturb, work, views, varying) -> np.ndarray | None:
        """One call for the points ``part``, or None (and ``fallback`` set) when it cannot be made."""
        stacked = {k: np.empty((len(part), *work[k].shape)) for k in varying}
        for j, pos in enumerate(part):
            restore = perturb(pos)
            try:
                for k in varying:
                    stacked[k][j] = work[k]
            finally:
                restore()
        params = {k: _read_only(stacked[k]) if k in stacked else views[k] for k in views}
        try:
            values = np.asarray(self.many(params, tuple(varying)))
        except Exception as exc:  # vmap refused the model: one call a point from now on
            self.fallback = describe(exc, "the batched loss")
            return None
        if values.shape != (len(part),) or values.dtype != np.float64:
            self.fallback = (
                f"the batched loss returned {values.dtype.name} of shape {values.shape}, not "
                f"{len(part)} float64 numbers"
            )
            return None
        self.calls += 1
        self.points += len(part)
        return values


def _one(loss: Callable[[dict[str, np.ndarray]], Any], pos, perturb, views) -> float:
    restore = perturb(pos)
    try:
        return evaluate_one(loss, views)
    finally:
        restore()


def _read_only(array: np.ndarray) -> np.ndarray:
    array.flags.writeable = False
    return array


def evaluate_one(loss: Callable[[dict[str, np.ndarray]], Any], arrays: dict[str, np.ndarray]) -> float:
    """``float(loss(arrays))``; NaN where the loss is not defined (an arithmetic or domain error)."""
    try:
        return float(loss(arrays))
    except ValueError as exc:
        if "read-only" in str(exc):  # it wrote to its inputs: a failure, not a point off the domain
            raise
        return math.nan
    except ArithmeticError:
        return math.nan
