"""Cases: plain data that alone determines the input arrays, and validation of user arrays (read from
files by ``crosscheck._files.load_array``)."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from crosscheck._compare.constants import ALL_DTYPES, DTYPES
from crosscheck._compare.dtypes import numpy_dtype
from crosscheck._workloads.protocol import POINT_KNOBS, Knob

INITS = ("gaussian", "identity", "integer", "nearzero")

#: The knobs of a case as data, in its fields' order (``Case``'s defaults): the stack's own (what
#: ``Stack`` takes) with the point's ``dtype`` and ``seed`` after its sizes. The CLI lists its case
#: options in this order, with these defaults and choices (``Stack.case_knobs``).
KNOBS = (
    Knob("layers", "number of layers L", int, 8),
    Knob("batch", "rows N of x", int, 8),
    Knob("dim", "width d", int, 16),
    *POINT_KNOBS,
    Knob("init", "how inputs are drawn", str, "gaussian", INITS),
    Knob("scale", "factor applied to x", float, 1.0),
)


@dataclasses.dataclass(frozen=True)
class Case:
    """One cross-check case of the ReLU stack.

    The same case gives the same arrays, bit for bit, on every machine: values are drawn with NumPy's
    PCG64 generator in float64 and rounded once to ``dtype``.

    Args:
        layers: number of layers ``L`` (the leading axis of ``weights``).
        batch: rows ``N`` of ``x``.
        dim: width ``d``.
        dtype: ``"float32"``, ``"float64"``, ``"bfloat16"`` or ``"float16"`` (16-bit arrays: computed in
            that dtype by each framework, products accumulated in float32).
        seed: seed of the generator.
        init: ``"gaussian"`` (He-scaled normal weights, normal ``x``), ``"identity"`` (identity weights,
            ``x`` all ones: every gradient entry is ``2 * N``), ``"integer"`` (small integers, giving
            exact zero pre-activations) or ``"nearzero"`` (integers nudged by ~1e-7, giving
            pre-activations too close to zero for float32 to get their sign right).
        scale: factor applied to ``x`` (tests the tolerances at other magnitudes).

    Example:
        >>> case = crosscheck.Case(layers=3, dim=2, batch=1, init="identity")
        >>> oracle = crosscheck.load_backend("numpy-fd")
        >>> oracle.grad(*crosscheck.make_inputs(case)).tolist()[0]  # 2 * N everywhere
        [[2.0, 2.0], [2.0, 2.0]]
    """

    layers: int = 8
    batch: int = 8
    dim: int = 16
    dtype: str = "float32"
    seed: int = 0
    init: str = "gaussian"
    scale: float = 1.0

    def __post_init__(self) -> None:
        for name in ("layers", "batch", "dim", "seed"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
                raise TypeError(f"`{name}` must be an integer, found {value!r}.")
            object.__setattr__(self, name, int(value))  # NumPy scalars would not serialize to JSON
        for name in ("layers", "batch", "dim"):
            if getattr(self, name) < 1:
                raise ValueError(f"`{name}` must be at least 1, found {getattr(self, name)}.")
        if self.seed < 0:
            raise ValueError(f"`seed` must be non-negative, found {self.seed}.")
        if self.dtype not in ALL_DTYPES:
            raise ValueError(f"`dtype` must be one of {', '.join(ALL_DTYPES)}; found {self.dtype!r}.")
        if self.init not in INITS:
            raise ValueError(f"`init` must be one of {', '.join(INITS)}; found {self.init!r}.")
        if isinstance(self.scale, bool) or not isinstance(self.scale, (int, float, np.integer, np.floating)):
            raise TypeError(f"`scale` must be a number, found {self.scale!r}.")
        if not (np.isfinite(self.scale) and self.scale > 0):
            raise ValueError(f"`scale` must be a positive finite number, found {self.scale!r}.")
        object.__setattr__(self, "scale", float(self.scale))

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def make_inputs(case: Case) -> tuple[np.ndarray, np.ndarray]:
    """Return ``(weights, x)`` for ``case``: shapes ``(L, d, d)`` and ``(N, d)``, dtype ``case.dtype``.

    Example:
        >>> weights, x = crosscheck.make_inputs(crosscheck.Case(layers=3, dim=2, batch=1, init="identity"))
        >>> weights.shape, x.shape, str(x.dtype)
        ((3, 2, 2), (1, 2), 'float32')
    """
    rng = np.random.default_rng(case.seed)
    shape_w, shape_x = (case.layers, case.dim, case.dim), (case.batch, case.dim)
    if case.init == "gaussian":
        weights = rng.standard_normal(shape_w) * np.sqrt(2.0 / case.dim)
        x = rng.standard_normal(shape_x)
    elif case.init == "identity":
        weights = np.broadcast_to(np.eye(case.dim), shape_w).copy()
        x = np.ones(shape_x)
    else:
        # Weights in {-1, 0, 1} keep the activations integers small enough (below 2**24) for float32
        # to compute every pre-activation exactly, zeros included.
        weights = rng.integers(-1, 2, size=shape_w).astype(np.float64)
        x = rng.integers(-2, 3, size=shape_x).astype(np.float64)
        if case.init == "nearzero":
            weights += rng.choice([-1.0, 1.0], size=shape_w) * 2.0**-23 * rng.random(shape_w)
    x = x * case.scale
    dtype = numpy_dtype(case.dtype)
    return weights.astype(dtype), x.astype(dtype)


def check_inputs(weights: Any, x: Any) -> tuple[np.ndarray, np.ndarray]:
    """Validate user arrays and return them as NumPy arrays (not copies when already arrays).

    Raises:
        ValueError: wrong rank, mismatched shapes, unsupported dtype, empty or non-finite values.
    """
    weights, x = np.asarray(weights), np.asarray(x)
    if weights.ndim != 3 or weights.shape[1] != weights.shape[2]:
        raise ValueError(f"`weights` must have shape (L, d, d); found shape {weights.shape}.")
    if x.ndim != 2:
        raise ValueError(f"`x` must have shape (N, d); found shape {x.shape}.")
    if x.shape[1] != weights.shape[1]:
        raise ValueError(
            f"`x` must have shape (N, {weights.shape[1]}) to match `weights` {weights.shape}; "
            f"found {x.shape}."
        )
    if min(weights.shape + x.shape) == 0:
        raise ValueError(f"`weights` {weights.shape} and `x` {x.shape} must not be empty.")
    for name, array in (("weights", weights), ("x", x)):
        if array.dtype.name not in DTYPES:
            raise ValueError(
                f"`{name}` must be float32 or float64; found {array.dtype.name}. "
                f"Convert it with `.astype('float32')`."
            )
        if not np.all(np.isfinite(array)):
            bad = int(np.size(array) - np.count_nonzero(np.isfinite(array)))
            raise ValueError(f"`{name}` must be finite; found {bad} NaN or infinite entries.")
    if weights.dtype != x.dtype:
        raise ValueError(
            f"`weights` and `x` must share one dtype; found {weights.dtype.name} and {x.dtype.name}."
        )
    return weights, x
