"""What the stack's reference answered, as its judges compare with it: the gradient's ``GradAnswer``
(value, error bar and the oracle's kink flags) and the HVP's ``HvpAnswer`` (value, error bar and its
kink judgements). Their own module, so that the judges and their screening (which checks failing layers
entry by entry into the same records) import it, not each other."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from crosscheck._compare.record import Kinks
from crosscheck._workloads.stack import rounding as _stack


@dataclasses.dataclass(frozen=True)
class GradAnswer:
    """The reference's gradient: value and error bar (``(L, d, d)``), and the oracle's kink flags."""

    value: np.ndarray
    error: np.ndarray
    kink: np.ndarray | None = None
    kink_at: np.ndarray | None = None


@dataclasses.dataclass(frozen=True)
class HvpAnswer:
    """The reference's HVP: value and error bar (``(L, d, d)``), and its kink judgements."""

    value: np.ndarray
    error: np.ndarray
    kinks: Kinks


def oracle_answer(est: Any) -> HvpAnswer:
    """The oracle's ``HvpEstimate`` as the judge's answer: value (NaN where not estimated), error bars
    and kink flags."""
    kinks = Kinks(
        est.kink,
        np.where(est.kink, est.reason, "").astype(object),
        np.broadcast_to(np.array(est.kink_at), (*est.kink.shape, len(_stack.KINK_NAMES))).copy(),
        np.full(est.kink.shape, np.nan),
    )
    return HvpAnswer(est.value, est.error, kinks)
