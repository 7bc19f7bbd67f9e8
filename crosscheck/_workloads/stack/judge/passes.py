"""The stack's float64 passes at one point, as a candidate's gradient is judged on them (``Passes``).

The gradient judge prepares them once per point (``Passes.of``): the forward and backward passes, and
what is made from them once and shared by every candidate: the rounding models, the underflow bounds
and the kink judgements (memos, filled when first asked for). The reference's phase hands them on made
along the screen's directions where it screened (``along``), with the oracle's float64 model kept
(``reuse``); a candidate is judged on a view of them at its device's arithmetic (``scaled``) and, where
its activations show its own ReLU pattern within rounding, held at that pattern (``held``). A view is
a frozen record of its own: it shares the memos of the passes it came from and never sets a field of
them, so no phase fills in an attribute for a later one to read.
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any

import numpy as np

from crosscheck._compare.dtypes import is_low
from crosscheck._compare.record import Comparison, Kinks
from crosscheck._workloads.stack import forward as _forward
from crosscheck._workloads.stack import kinks as _kinks
from crosscheck._workloads.stack import rounding
from crosscheck._workloads.stack import underflow as _underflow
from crosscheck._workloads.stack.forward import Forward
from crosscheck._workloads.stack.judge.answers import GradAnswer
from crosscheck._workloads.stack.pattern import Pattern

#: Fraction of an entry's tolerance that a possible ReLU flip may move it before it is unjudgeable.
KINK_IMPACT_FRACTION = 0.25
#: A dtype's kink judgement: each layer's bounds, the ambiguous pre-activations, what flipping each does.
KinkJudgement = tuple[list[np.ndarray], np.ndarray, _kinks.KinkEffects]


@dataclasses.dataclass(frozen=True, eq=False)
class Passes:
    """The float64 passes a candidate is judged on, and the memos made from them.

    Attributes:
        weights, x: the point's arrays (``(L, d, d)``, ``(N, d)``).
        fwd, deltas: the float64 forward pass and its ``dloss/dz``: float64's own, or held at
            ``pattern``.
        directions: the screen's directions, when the reference screened: the rounding models are
            made along them too.
        scale: how many times float32's unit roundoff the candidate's device computes float32 with
            (``device.Arithmetic``): its rounding model is scaled so (1 on a CPU).
        pattern: the candidate's own ReLU pattern these passes are held at (None: float64's).
        models, underflows: the rounding model and the underflow bounds of each dtype, made once.
        kinks: the kink judgement of each dtype, with the digest of the tolerance it was made for
            (the same for every candidate of a dtype: a digest, not a copy of a gradient-sized array).
    """

    weights: np.ndarray
    x: np.ndarray
    fwd: Forward
    deltas: list[np.ndarray]
    directions: np.ndarray | None = None
    scale: float = 1.0
    pattern: Pattern | None = None
    models: dict[str, rounding.RoundingModel] = dataclasses.field(default_factory=dict)
    underflows: dict[str, _underflow.Underflow] = dataclasses.field(default_factory=dict)
    kinks: dict[str, tuple[tuple, KinkJudgement]] = dataclasses.field(default_factory=dict)

    @classmethod
    def of(cls, weights: np.ndarray, x: np.ndarray) -> Passes:
        """The float64 passes at ``weights`` and ``x``, with empty memos."""
        fwd = _forward.forward(weights, x)
        deltas, _ = _forward.backward(fwd, grads=False)
        return cls(weights, x, fwd, deltas)

    # -- views --------------------------------------------------------------------------------------

    def along(self, directions: np.ndarray) -> Passes:
        """These passes with their rounding models made along the screen's ``directions``."""
        return dataclasses.replace(self, directions=directions)

    def scaled(self, scale: float) -> Passes:
        """These passes as a candidate computing at ``scale`` times float32's unit roundoff sees them."""
        return dataclasses.replace(self, scale=scale)

    def held(self, pattern: Pattern) -> Passes:
        """These passes held at ``pattern``: its passes, models, underflow bounds and kink judgements
        (the float64 model, the reference's, is kept). A pattern that is float64's has float64's
        passes bit for bit: its models and bounds are these passes' own, shared (made once for every
        candidate that took it)."""
        models, underflows = self.models, self.underflows
        if len(pattern.flipped):
            models, underflows = {"float64": self.model("float64")}, {}
        return dataclasses.replace(
            self,
            fwd=pattern.fwd,
            deltas=pattern.deltas,
            pattern=pattern,
            models=models,
            underflows=underflows,
            kinks={},
        )

    # -- what is made from them ---------------------------------------------------------------------

    def model(self, dtype: str) -> rounding.RoundingModel:
        """The rounding model of ``dtype``; a candidate's scaled to its device (``scale``)."""
        if dtype not in self.models:
            self.models[dtype] = rounding.rounding_model(
                self.fwd, self.deltas, dtype, directions=self.directions
            )
        found = self.models[dtype]
        return found if dtype == "float64" else found.scaled(self.scale)

    def reuse(self, model: Any) -> None:
        """Keep the oracle's float64 rounding model (made from the same point, seed and directions as
        these passes' would be) instead of computing it again; anything else is ignored."""
        screening = self.directions is not None
        if not isinstance(model, rounding.RoundingModel) or model.dtype != "float64":
            return
        if model.grad_sigma.shape != self.weights.shape or (model.direction_sigma is None) == screening:
            return
        self.models.setdefault("float64", model)

    def underflow(self, dtype: str) -> _underflow.Underflow:
        """The underflow bounds of ``dtype``."""
        if dtype not in self.underflows:
            self.underflows[dtype] = _underflow.underflow(self.fwd, self.deltas, dtype)
        return self.underflows[dtype]

    def answer(self, oracle: GradAnswer) -> GradAnswer:
        """The oracle's every-entry answer moved to these passes' pattern, on the layers it answers
        (the others stay NaN), with the change's rounding bound added to its error bar (unchanged
        without a pattern, or on float64's)."""
        pattern = self.pattern
        if pattern is None or not len(pattern.flipped):
            return oracle
        value, error = oracle.value.copy(), oracle.error.copy()
        for k in range(len(value)):
            if np.isnan(value[k]).all():
                continue
            change, bound = pattern.change(k)
            value[k] += change
            error[k] += bound
        return dataclasses.replace(oracle, value=value, error=error)

    def range_cause(self, found: Comparison, value: np.ndarray, dtype: str) -> Comparison:
        """A non-finite result's cause, when the case's values pass ``dtype``'s range (float16)."""
        if found.status != "invalid" or np.all(np.isfinite(np.asarray(value, np.float64))):
            return found
        cause = _underflow.overflow(self.fwd, self.deltas, dtype)
        return dataclasses.replace(found, message=f"{found.message} {cause}") if cause else found

    # -- kinks --------------------------------------------------------------------------------------

    def kink_bounds(self, dtype: str) -> list[np.ndarray]:
        """What may flip each pre-activation's ReLU: the candidate's modelled rounding (scaled to its
        device), the reference's and the underflow bound; held at the candidate's own pattern, the
        reference's alone (the candidate's signs are known)."""
        reference = self.model("float64")
        if self.pattern is not None:
            return [reference.z_bound(m) for m in range(len(self.fwd.zs))]
        model, flow = self.model(dtype), self.underflow(dtype).z
        return [model.z_bound(m) + reference.z_bound(m) + flow[m] for m in range(len(self.fwd.zs))]

    def kink_effects(self, dtype: str, tol: np.ndarray, scale: float = 1.0) -> KinkJudgement:
        """The ambiguous pre-activations for ``dtype`` (with their bounds) and what flipping them does,
        for the tolerance ``scale * tol`` (a screen passes the rounding model's sigma and ``SAFETY``:
        the same products, a layer at a time, with no gradient-sized ``grad_bound`` made for it)."""
        memo, key = self.kinks.get(dtype), (_digest(tol), scale)
        if memo is not None and memo[0] == key:
            return memo[1]
        bounds = self.kink_bounds(dtype)
        found = _kinks.ambiguous_kinks(self.fwd, bounds)
        low, fraction = is_low(dtype), KINK_IMPACT_FRACTION * scale
        effects = _kinks.kink_effects(
            self.fwd, self.deltas, found, tol, bounds, last_layer_forward=low, fraction=fraction
        )
        self.kinks[dtype] = (key, (bounds, found, effects))
        return bounds, found, effects

    def forget_kinks(self, dtype: str) -> None:
        """Drop ``dtype``'s kink judgement (a screen that has taken what it needs of it: three
        gradient-sized arrays less for the rest of the run)."""
        self.kinks.pop(dtype, None)

    def judged_kinks(
        self, tol: np.ndarray, dtype: str, oracle: GradAnswer, at: np.ndarray | None = None
    ) -> tuple[Kinks, np.ndarray]:
        """Judge kink-ambiguous entries on both sides of one kink; more than one is unjudgeable. With
        ``at`` (``(S, 3)`` entries), of those entries alone: ``oracle``'s fields are theirs, ``(S,)``."""
        bounds, found, effects = self.kink_effects(dtype, tol)
        if at is not None:
            where = tuple(np.asarray(at).T)
            picked = {
                name: getattr(effects, name)[where] for name in ("count", "alternative", "culprit", "minor")
            }
            effects = dataclasses.replace(effects, **picked)
        unjudgeable = effects.count > 1
        reason = np.where(unjudgeable, f"{dtype} rounding may flip several ReLUs", "").astype(object)
        kink = np.full(unjudgeable.shape + (len(rounding.KINK_NAMES),), -1, np.int64)
        involved = effects.count > 0
        if len(found):
            kink[involved] = found[effects.culprit[involved]]
        alternative = np.where(effects.count == 1, oracle.value + effects.alternative, np.nan)
        if oracle.kink is not None and oracle.kink_at is not None and oracle.kink.any():
            stuck = oracle.kink & ~unjudgeable & ~self._exact_zero_kinks(bounds, oracle)
            unjudgeable = unjudgeable | stuck
            reason[stuck] = "oracle step crosses a ReLU kink"
            kink[stuck] = oracle.kink_at[stuck]
            alternative[stuck] = np.nan
        return Kinks(unjudgeable, reason, kink, alternative), effects.minor

    def _exact_zero_kinks(self, bounds: list[np.ndarray], oracle: GradAnswer) -> np.ndarray:
        """Oracle kink entries whose kink is an exact zero that the candidate also computes exactly."""
        at, kink = oracle.kink_at, oracle.kink
        assert at is not None and kink is not None
        exact = np.zeros(at.shape[:-1], bool)
        flagged = np.nonzero(kink)
        layer, row, unit = at[flagged].T
        zero = np.zeros(len(layer), bool)
        # A layer of flagged entries at a time (an integer case at width flags millions of entries).
        for m in np.unique(layer):
            on = layer == m
            zero[on] = (self.fwd.zs[m][row[on], unit[on]] == 0) & (bounds[m][row[on], unit[on]] == 0)
        exact[flagged] = zero
        return exact


def _digest(values: np.ndarray) -> tuple:
    """What identifies a tolerance array for the kink memo: its shape, dtype and a BLAKE2b digest of
    its bytes (read in place, never copied)."""
    values = np.ascontiguousarray(values)
    return values.shape, values.dtype.str, hashlib.blake2b(values.data.cast("B")).hexdigest()
