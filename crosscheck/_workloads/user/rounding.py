"""A candidate's rounding, *measured*: the same backend re-run on the same values in the other precision.

For a float32 case, ``|g32 - g64|``; for a float64 case, ``|g64 - g32|`` scaled by ``2**-29`` (rounding
error is, to first order, proportional to the unit roundoff). The per-entry term is that difference
plus its RMS over the parameter (one re-run is one sample of the rounding), times ``SAFETY``; the
signed difference is kept too, so that screening can project it on its directions.

The float64 run is checked, not trusted: it must come back in float64 and hold float64 numbers. A
module pinned to float32 (a Flax module built with ``dtype=float32``, a PyTorch module that casts)
computes in float32 whatever it is given, so its "float64" result is the float32 result (bit for bit,
or at least float32 numbers in every entry); such a run gets the conservative bound
(``FALLBACK_ULPS`` float32 unit roundoffs of ``|gradient|`` + RMS) and a note naming the
implementation.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from crosscheck._compare.constants import OTHER_DTYPE, SAFETY, UNIT_ROUNDOFF, WIDEN

#: Without a usable re-run in the other precision: this many unit roundoffs of |gradient| + its RMS.
FALLBACK_ULPS = 1024.0


@dataclasses.dataclass(frozen=True)
class Rounding:
    """A candidate's rounding: ``term`` per entry (the tolerance's ``rounding``), ``delta`` the signed
    measured difference (None when not measured), ``how`` it was obtained, ``honest`` False when its
    float64 run did not compute in float64."""

    term: dict[str, np.ndarray]
    delta: dict[str, np.ndarray] | None
    how: str
    honest: bool = True


def rms(values: np.ndarray) -> float:
    return math.sqrt(float(np.mean(np.square(values)))) if np.size(values) else 0.0


def usable(again: dict | None, shapes: dict[str, tuple[int, ...]], other: str) -> bool:
    """Whether a re-run came back with every parameter, of its shape, in the other precision."""
    return again is not None and all(
        k in again and np.shape(again[k]) == s and again[k].dtype.name == other for k, s in shapes.items()
    )


#: A float64 result with at least this many nonzero entries, every one a float32 number, was computed
#: in float32 (a true float64 result has ~29 more significant bits, which are almost never all zero).
FLOAT32_EXACT_ENTRIES = 8


def ran_in_float32(wide: dict[str, np.ndarray], narrow: dict[str, np.ndarray]) -> bool:
    """Whether the "float64" run computed in float32: it equals the float32 run bit for bit (and is not
    all zero), or every entry of it is a float32 number (``FLOAT32_EXACT_ENTRIES`` nonzero at least)."""
    wide64 = {k: np.asarray(w, np.float64) for k, w in wide.items()}
    nonzero = sum(int(np.count_nonzero(w)) for w in wide64.values())
    if nonzero == 0:
        return False
    if all(np.array_equal(w, np.asarray(narrow[k]).astype(np.float64)) for k, w in wide64.items()):
        return True
    with np.errstate(over="ignore", invalid="ignore"):
        exact = all(np.array_equal(w.astype(np.float32).astype(np.float64), w) for w in wide64.values())
    return exact and nonzero >= FLOAT32_EXACT_ENTRIES


def measure(
    value: dict[str, np.ndarray],
    again: dict[str, np.ndarray] | None,
    *,
    shapes: dict[str, tuple[int, ...]],
    dtype: str,
    name: str,
) -> Rounding:
    """The rounding of the candidate ``name`` from its result ``value`` and its re-run ``again``."""
    other = OTHER_DTYPE[dtype]
    if not usable(again, shapes, other) or not all(
        k in value and np.shape(value[k]) == s for k, s in shapes.items()
    ):
        how = f"no usable re-run in {other}: {FALLBACK_ULPS:g} unit roundoffs of |gradient| + RMS"
        return Rounding(_fallback(value, shapes, UNIT_ROUNDOFF[dtype]), None, how)
    assert again is not None
    wide, narrow = (again, value) if dtype == "float32" else (value, again)
    if ran_in_float32(wide, narrow):
        how = (
            f"`{name}` did not compute in float64: its float64 run gave float32 numbers (a module pinned "
            f"to float32?); conservative bound, {FALLBACK_ULPS:g} float32 unit roundoffs of "
            "|gradient| + RMS"
        )
        return Rounding(_fallback(value, shapes, UNIT_ROUNDOFF["float32"]), None, how, honest=False)
    scale = 1.0 if dtype == "float32" else WIDEN
    term, delta = {}, {}
    for k in shapes:
        with np.errstate(invalid="ignore", over="ignore"):
            signed = scale * (np.asarray(value[k], np.float64) - np.asarray(again[k], np.float64))
        signed = np.nan_to_num(signed, nan=0.0, posinf=0.0, neginf=0.0)
        d = np.abs(signed)
        term[k], delta[k] = SAFETY * (d + rms(d)), signed
    return Rounding(term, delta, f"measured: re-run in {other}")


def _fallback(value: dict, shapes: dict[str, tuple[int, ...]], u: float) -> dict[str, np.ndarray]:
    out = {}
    for k, shape in shapes.items():
        mine = np.abs(np.asarray(value.get(k, 0.0), np.float64))
        if mine.shape != shape:
            mine = np.zeros(shape)
        d = np.nan_to_num(FALLBACK_ULPS * u * mine, nan=0.0, posinf=0.0)
        out[k] = SAFETY * (d + rms(d))
    return out
