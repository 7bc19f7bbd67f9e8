"""The records ``crosscheck inspect`` fills: what a backend keeps for backward and what it was found to do."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["Residual", "Structure", "grouped", "ulp_difference"]


@dataclass
class Residual:
    """One value kept from forward to backward."""

    shape: tuple[int, ...]
    dtype: str
    nbytes: int
    origin: str
    role: str  # "weights" (the parameters, alive anyway) or "activation" (x and what is computed)

    def to_dict(self) -> dict[str, Any]:
        return {
            "shape": list(self.shape),
            "dtype": self.dtype,
            "bytes": self.nbytes,
            "origin": self.origin,
            "role": self.role,
        }


@dataclass
class Structure:
    """What ``inspect_backend`` found for one backend, against what it claims."""

    backend: str
    framework: str  # "jax", "torch", or "" when the backend cannot be inspected
    layers: int
    claims: dict[str, Any] | None
    found: dict[str, Any] = field(default_factory=dict)
    residuals: list[Residual] = field(default_factory=list)
    evidence: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """No claim is contradicted by what the program does."""
        return not self.problems

    @property
    def activation_bytes(self) -> int:
        """Bytes kept for backward besides the weights (which are alive anyway)."""
        return sum(r.nbytes for r in self.residuals if r.role != "weights")

    @property
    def residual_bytes(self) -> int:
        """Bytes of every residual, the weights included."""
        return sum(r.nbytes for r in self.residuals)

    def to_dict(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "framework": self.framework,
            "layers": self.layers,
            "claims": self.claims,
            "found": self.found,
            "ok": self.ok,
            "problems": self.problems,
            "evidence": self.evidence,
            "residuals": [r.to_dict() for r in self.residuals],
            "residual_bytes": self.residual_bytes,
            "activation_bytes": self.activation_bytes,
        }


def grouped(residuals: list[Residual]) -> list[tuple[int, Residual]]:
    """Identical residuals (shape, dtype, role, origin) counted once each: ``[(count, residual)]``."""
    counts: Counter = Counter((r.shape, r.dtype, r.nbytes, r.origin, r.role) for r in residuals)
    return [(n, Residual(*key)) for key, n in counts.items()]


def ulp_difference(a: np.ndarray, b: np.ndarray) -> tuple[int, float]:
    """How many entries differ, and the largest difference in units in the last place of the larger."""
    a, b = np.asarray(a), np.asarray(b)
    differ = int(np.count_nonzero(a != b))
    if not differ:
        return 0, 0.0
    spacing = np.spacing(np.maximum(np.abs(a), np.abs(b)))
    return differ, float(np.max(np.abs(a.astype(np.float64) - b) / spacing))
