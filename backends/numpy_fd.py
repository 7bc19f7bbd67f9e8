"""The NumPy finite-difference oracle: float64, no autodiff, an error bar on every entry.

The algorithm (a kink-aware central difference, per entry or along directions) is in
``crosscheck._workloads.stack.oracle.fd``; see README, "The oracle".
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from crosscheck._workloads.stack.forward import forward
from crosscheck._workloads.stack.oracle import fd as _fd
from crosscheck._workloads.stack.oracle import preactivation as _preactivation
from crosscheck._workloads.stack.oracle.fd import OracleEstimate, ScreenEstimate
from crosscheck._workloads.stack.oracle.preactivation import PreactivationEstimate

__all__ = ["FiniteDifferenceOracle", "OracleEstimate", "PreactivationEstimate", "ScreenEstimate"]


class FiniteDifferenceOracle:
    """Finite-difference gradient of the ReLU stack in float64, with an error bound per entry."""

    name = "numpy-fd"
    #: The oracle always answers in float64, whatever the case's dtype.
    output_dtype = "float64"

    def grad(self, weights: np.ndarray, x: np.ndarray) -> np.ndarray:
        """Return the float64 gradient estimate, shape ``(L, d, d)``."""
        return self.estimate(weights, x).value

    def estimate(
        self,
        weights: np.ndarray,
        x: np.ndarray,
        *,
        layers: Sequence[int] | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> OracleEstimate:
        """Estimate the gradient with an error bound per entry.

        Args:
            weights: ``(L, d, d)`` float array (not modified).
            x: ``(N, d)`` float array (not modified).
            layers: estimate only these layers (the others are NaN); default all.
            progress: called as ``progress(done, total)`` in units of perturbed entries.
        """
        return _fd.estimate(weights, x, layers=layers, progress=progress)

    def estimate_outputs(
        self,
        weights: np.ndarray,
        x: np.ndarray,
        *,
        progress: Callable[[int, int], None] | None = None,
    ) -> PreactivationEstimate:
        """``estimate``'s answer (every entry, with an error bound and its kink flags) from differences
        of the loss in each layer's outputs instead of its weights: ``L**2 N d**3 / 2`` flops where
        ``estimate`` takes ``L**2 N d**4`` (``crosscheck._workloads.stack.oracle.preactivation``).

        Args:
            weights: ``(L, d, d)`` float array (not modified).
            x: ``(N, d)`` float array (not modified).
            progress: called as ``progress(done, total)`` in units of perturbed outputs.
        """
        return _preactivation.estimate(weights, x, progress=progress)

    def estimate_entries(
        self, weights: np.ndarray, x: np.ndarray, index: np.ndarray, *, rounding: Any = None
    ) -> OracleEstimate:
        """``estimate`` at the entries ``index`` alone (``(S, 3)``: ``(layer, row, col)``), each field
        ``(S,)``: what a screen's spot check compares a candidate's largest entries with.

        Args:
            weights: ``(L, d, d)``; x: ``(N, d)`` (not modified).
            index: the entries, ``(S, 3)`` integers.
            rounding: this point's float64 rounding model (a screen's), which sizes each error bar's
                shared-prefix part; made when not given.
        """
        return _fd.entries(weights, x, index, rounding=rounding)

    def screen(
        self,
        weights: np.ndarray,
        x: np.ndarray,
        directions: np.ndarray,
        *,
        progress: Callable[[int, int], None] | None = None,
        keep_model: bool = True,
    ) -> ScreenEstimate:
        """Directional derivatives ``sum(grad[k] * directions[k, s])``, each with an error bound.

        Args:
            weights: ``(L, d, d)``; x: ``(N, d)`` (not modified).
            directions: ``(L, S, d, d)``: ``S`` directions per layer.
            progress: called as ``progress(done, total)`` in units of directions.
            keep_model: also model every entry's rounding and return the model (``rounding``).
        """
        return _fd.screen(weights, x, directions, progress=progress, keep_model=keep_model)

    def hvp(self, weights: np.ndarray, x: np.ndarray, v: np.ndarray) -> np.ndarray:
        """The float64 Hessian-vector product ``H v`` from loss evaluations only (NaN if unjudgeable)."""
        return self.hvp_estimate(weights, x, v).value

    def hvp_estimate(
        self, weights: np.ndarray, x: np.ndarray, v: np.ndarray, *, layers: Sequence[int] | None = None
    ):
        """``H v`` with an error bound per entry and its kink flags (see
        ``crosscheck._workloads.stack.oracle.hvp``): the derivative along ``v`` of this oracle's gradient,
        exact for the polynomial the stack is between kinks. ``layers``: only these (NaN elsewhere)."""
        from crosscheck._workloads.stack.oracle.hvp import oracle_hvp

        return oracle_hvp(self, weights, x, v, layers=layers)

    def hvp_screen(self, weights: np.ndarray, x: np.ndarray, v: np.ndarray, directions: np.ndarray):
        """``sum((H v)[k] * directions[k, s])`` with error bars and kink flags, from this oracle's
        screening along ``directions`` (``(L, S, d, d)``): the derivative along ``v`` of ``screen``."""
        from crosscheck._workloads.stack.oracle.hvp import oracle_hvp_screen

        return oracle_hvp_screen(self, weights, x, v, directions)

    def activations(self, weights: np.ndarray, x: np.ndarray) -> np.ndarray:
        """The float64 forward activations ``y[1] .. y[L]``, shape ``(L, N, d)``."""
        return np.stack(forward(weights, x).ys[1:])

    def info(self) -> dict[str, str]:
        return {
            "framework": "numpy",
            "version": np.__version__,
            "device": "cpu",
            "method": "kink-aware central difference, float64",
        }
