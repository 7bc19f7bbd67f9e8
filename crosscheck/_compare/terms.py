"""What a dtype's rounding permits a result, so that no candidate sets its own tolerance.

A side's rounding is measured by re-running it in the other precision; that difference is evidence, not
a tolerance to take as it comes: an error that exists only in a side's float32 run (a bfloat16 step, an
approximation taken only in float32, a nondeterministic result) would otherwise be its own tolerance.
``bound`` says, from the float64 result alone, what float32 rounding may do to each entry:
``PERMIT_ULPS`` float32 unit roundoffs of the entry's scale (``|value|`` + the RMS of its array + an
optional scale shared by all arrays). ``median_ratio`` judges a measured difference against it by its
typical entry, so that isolated entries (a kink decided differently in the two precisions) do not count.

A 16-bit case (bfloat16, float16) re-runs each side in float32; what its rounding permits is
``LOW_PERMIT_ULPS`` of the dtype's own unit roundoff, a number calibrated on healthy ports, not 256 u
(which is 100 % of an entry in bfloat16): ``docs/measurements/mixed-precision.md``.
"""

from __future__ import annotations

import math

import numpy as np

from crosscheck._compare.dtypes import unit_roundoff

#: Healthy workloads and ports measure a median of at most ~5 and a largest entry of ~30 float32 unit
#: roundoffs of this scale (``docs/explanations/reliability.md``); bfloat16 rounding is ~10,000 and a
#: 1 % error ~100,000.
PERMIT_ULPS = 256.0
#: A 16-bit dtype's: its unit roundoffs of the same scale, against its float32 re-run. Healthy GPT-2
#: measures a median of at most 5.1 (bfloat16, 20 seeds) and 6.2 (float16, 20 seeds), the convnet 0.5:
#: 16 leaves a factor 2.6. Planted porting bugs change both runs alike and are caught against the
#: reference, not by this; a side far off its own float32 run is (``docs/measurements/mixed-precision.md``).
LOW_PERMIT_ULPS = {"bfloat16": 16.0, "float16": 16.0}


def permit_ulps(dtype: str) -> float:
    """How many of ``dtype``'s unit roundoffs its rounding may cost an entry's scale."""
    return LOW_PERMIT_ULPS.get(dtype, PERMIT_ULPS)


def rms(values: np.ndarray) -> float:
    return math.sqrt(float(np.mean(np.square(values)))) if np.size(values) else 0.0


def bound(wide: np.ndarray, shared: float = 0.0, dtype: str = "float32") -> np.ndarray:
    """Per entry, the difference ``dtype``'s rounding permits against the wider precision, from the wide
    result ``wide`` (and ``shared``, a scale common to several arrays: the RMS of a whole gradient):
    float32 against float64, or a 16-bit dtype against float32."""
    value = np.nan_to_num(np.abs(np.asarray(wide, np.float64)), nan=0.0, posinf=0.0)
    return permit_ulps(dtype) * unit_roundoff(dtype) * (value + rms(value) + shared)


def median_ratio(diff: np.ndarray, permit: np.ndarray, wide: np.ndarray | None = None) -> float:
    """The typical entry's measured difference over what is permitted (> 1: beyond float32). Entries
    zero in both precisions (a dead ReLU unit's, an unused parameter's) say nothing and are left out
    when ``wide`` is given."""
    diff = np.abs(np.asarray(diff, np.float64))
    if wide is not None:
        informative = (diff != 0) | (np.asarray(wide) != 0)
        diff, permit = diff[informative], np.broadcast_to(permit, informative.shape)[informative]
    if np.size(diff) == 0:
        return 0.0
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = np.where(diff == 0, 0.0, diff / permit)
    return float(np.median(np.nan_to_num(ratios, nan=np.inf)))


def cap(
    signed: np.ndarray, wide: np.ndarray, shared: float = 0.0, dtype: str = "float32"
) -> tuple[np.ndarray, float]:
    """A measured difference ``signed`` (the ``dtype`` result minus the wider ``wide``), clipped at
    ``bound`` where its typical entry is beyond it, and that ``median_ratio``: never its own tolerance."""
    limit = bound(wide, shared, dtype)
    ratio = median_ratio(signed, limit, wide)
    return (np.clip(signed, -limit, limit) if ratio > 1.0 else signed), ratio
