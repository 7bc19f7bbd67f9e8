"""One side's trajectories, as every ``update`` comparison takes them: in the case's dtype and re-run in
float64. Below the judge, ``locate`` and ``state``, which all make them (the judge compares them:
``UpdateJudge.judged``)."""

from __future__ import annotations

import dataclasses

import numpy as np

from crosscheck._compare.record import Comparison

#: Up to this many steps the port's gradient runs eagerly: compiling it costs more than it saves (the
#: classification's short re-runs); longer runs compile it. The optimizer's step (optax's ``update``, a
#: ``jax_step``) is never compiled: it runs as written at every step, so that Python in it (a step count
#: kept in Python, a branch on it) runs every time, as it does in the user's own eager loop, not only
#: while a trace is made.
EAGER_STEPS = 3

#: What the report says of how each side's step ran (``notes["step"]``).
HOW = (
    "the optimizer step (optax's update, or the jax_step given) is run as written at every step, never "
    f"compiled; the port's gradient is compiled above {EAGER_STEPS} steps"
)

#: A side's parameters after every step: ``name -> (steps + 1, ...)``.
Trajectories = dict[str, np.ndarray]


@dataclasses.dataclass(frozen=True)
class Runs:
    """One side's trajectories: in the case's dtype and re-run in float64 (``name -> (steps + 1, ...)``)."""

    main: Trajectories
    wide: Trajectories


def failed(name: str, reference: str, text: str, *, parameter: str = "(update)") -> Comparison:
    """A row that was not checked, and failed: ``text`` says why (the update's, or the gradient check's
    at the start)."""
    return Comparison(
        backend=name,
        reference=reference,
        passed=False,
        status="invalid",
        total=1,
        parameter=parameter,
        message=text,
    )
