"""One side's trajectories, as every ``update`` comparison takes them: in the case's dtype and re-run in
float64. Below the judge, ``locate`` and ``state``, which all make them (the judge compares them:
``UpdateJudge.judged``)."""

from __future__ import annotations

import dataclasses

import numpy as np

#: A side's parameters after every step: ``name -> (steps + 1, ...)``.
Trajectories = dict[str, np.ndarray]


@dataclasses.dataclass(frozen=True)
class Runs:
    """One side's trajectories: in the case's dtype and re-run in float64 (``name -> (steps + 1, ...)``)."""

    main: Trajectories
    wide: Trajectories
