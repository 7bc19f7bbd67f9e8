"""The dtypes a case may be in, as NumPy dtypes: float32 and float64 are NumPy's own; bfloat16 is
``ml_dtypes``' (the NumPy extension type JAX uses, imported only when a case asks for it), float16
NumPy's. A 16-bit case stores every array, and every product's result, in its dtype while products
accumulate in float32 (``constants.ACCUMULATION``)."""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

from crosscheck._compare.constants import ACCUMULATION, ALL_DTYPES, STORAGE_ROUNDOFF, UNIT_ROUNDOFF


def numpy_dtype(name: str) -> np.dtype:
    """The NumPy dtype of ``name`` (one of ``ALL_DTYPES``)."""
    if name not in ALL_DTYPES:
        raise ValueError(f"`dtype` must be one of {', '.join(ALL_DTYPES)}; found {name!r}.")
    if name == "bfloat16":
        try:
            import ml_dtypes
        except ImportError as exc:  # pragma: no cover - installed with crosscheck (and with JAX)
            raise ImportError("bfloat16 needs `ml_dtypes`: `pip install ml_dtypes`.") from exc
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def finfo(name: str) -> np.finfo[Any]:
    """``numpy.finfo`` of ``name`` (``ml_dtypes.finfo`` for bfloat16): ``max``, ``tiny``, ``eps``."""
    if name == "bfloat16":
        import ml_dtypes

        return ml_dtypes.finfo(ml_dtypes.bfloat16)
    return np.finfo(name)


def is_float(array: np.ndarray) -> bool:
    """Whether ``array`` holds one of the floats crosscheck judges (bfloat16 is not a NumPy number)."""
    return array.dtype.name in ALL_DTYPES


def casts(array: np.ndarray) -> bool:
    """Whether ``as_dtype`` casts ``array``: any NumPy float, or one of crosscheck's (bfloat16)."""
    return bool(np.issubdtype(array.dtype, np.floating)) or is_float(array)


#: Bytes a copy made here is aligned to: XLA's CPU client reads a NumPy array of this alignment in place
#: (``jax.device_put`` without a copy); NumPy's own large arrays start 16 bytes into a page.
ALIGN = 64


def aligned_copy(array: np.ndarray, dtype: Any = None) -> np.ndarray:
    """A copy of ``array`` (in ``dtype``: as ``astype`` casts), its data ``ALIGN``-byte aligned, in
    ``array``'s memory order (Fortran order kept, anything else C): the same values as ``astype`` or
    ``np.array(copy=True)``, which a JAX backend can then read without a device copy."""
    array = np.asarray(array)
    target = array.dtype if dtype is None else np.dtype(dtype)
    if target.hasobject or array.dtype.hasobject or target.fields is not None:
        return np.array(array, dtype=target, copy=True)
    fortran = array.flags.f_contiguous and not array.flags.c_contiguous
    out = aligned_empty(array.shape, target, order="F" if fortran else "C")
    out[...] = array  # the cast ``astype`` makes (unsafe casting, element by element)
    return out


def aligned_empty(shape: Any, dtype: Any, order: Literal["C", "F"] = "C") -> np.ndarray:
    """``np.empty(shape, dtype, order=order)`` (``order``: ``"C"`` or ``"F"``), its data ``ALIGN``-byte
    aligned: what a JAX backend reads in place (``aligned_copy``; a worker's received arrays,
    ``isolate_worker.receive``)."""
    target = np.dtype(dtype)
    shape = tuple(shape) if isinstance(shape, (tuple, list)) else (shape,)
    size = int(np.prod(shape, dtype=np.int64)) * target.itemsize
    raw = np.empty(size + ALIGN, np.uint8)
    start = -raw.ctypes.data % ALIGN
    return np.ndarray(shape, target, buffer=raw[start : start + size], order=order)


def as_dtype(arrays: dict[str, np.ndarray], dtype: str) -> dict[str, np.ndarray]:
    """Copies with every floating-point array in ``dtype`` (integer and boolean arrays unchanged),
    aligned (``aligned_copy``)."""
    target = numpy_dtype(dtype)
    return {k: aligned_copy(v, target) if casts(v) else aligned_copy(v) for k, v in arrays.items()}


def accumulation(name: str) -> str:
    """The dtype products of ``name`` accumulate in: itself, or float32 for a 16-bit dtype."""
    return ACCUMULATION.get(name, name)


def roundoffs(name: str) -> tuple[float, float]:
    """``(accumulation, storage)``: the unit roundoff a product of ``name`` sums in, and the one its
    result is rounded to when stored (0 for float32 and float64: no rounding beyond the sum's)."""
    return UNIT_ROUNDOFF[accumulation(name)], STORAGE_ROUNDOFF.get(name, 0.0)


def unit_roundoff(name: str) -> float:
    """The unit roundoff of a stored result of ``name``: its own (a 16-bit dtype's storage roundoff)."""
    return STORAGE_ROUNDOFF.get(name) or UNIT_ROUNDOFF[name]


def is_low(name: str) -> bool:
    """Whether ``name`` is a 16-bit dtype (stored in 16 bits, accumulated in float32)."""
    return name in STORAGE_ROUNDOFF
