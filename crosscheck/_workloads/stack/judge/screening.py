"""What a screen holds and shares with every candidate it judges: the oracle's directional derivatives
and the oracle itself (``Screening``), with what each dtype is screened along (``Along``), the layers it
checked entry by entry and the spot check's memo. The gradient's screen and the HVP's hold one each
(the words a screen says are ``crosscheck._compare.screening``'s).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np


@dataclasses.dataclass(frozen=True)
class Along:
    """What one dtype's candidates are screened along: the directions (the screen's, less the entries
    that several ReLU flips may move, which are unjudgeable), the oracle's derivatives along them and
    their error, the modelled spread of the dtype's rounding along them, the kink slack, and the
    unjudgeable entries (``(L, d, d)`` bool)."""

    directions: np.ndarray
    value: np.ndarray
    error: np.ndarray
    sigma: np.ndarray
    slack: np.ndarray
    unjudgeable: np.ndarray


@dataclasses.dataclass
class Screening:
    """A judge's screening: the oracle's directional derivatives (``estimate``: value, error, directions),
    the oracle that checks failing layers entry by entry, those checks by layer and what each dtype is
    screened along (each computed once, shared by every candidate)."""

    estimate: Any
    oracle: Any
    #: The full checks by layer: (value, error, kink, kink_at).
    full_layers: dict[int, tuple[np.ndarray, ...]] = dataclasses.field(default_factory=dict)
    #: What each dtype is screened along (``Along``), or why the oracle could not screen it.
    along: dict[str, Along | str] = dataclasses.field(default_factory=dict)
    #: The oracle's evaluations after its first screen (its screens of the judgeable entries, its spots).
    more_evaluations: int = 0
    #: The spot check's memo (``spot``): the oracle at single entries, by ``(layer, row, col)``, and
    #: its kink judgements, by what each was made for (shared with a view held at a pattern).
    spots: dict[tuple, Any] = dataclasses.field(default_factory=dict)

    @property
    def directions(self) -> np.ndarray:
        return self.estimate.directions
