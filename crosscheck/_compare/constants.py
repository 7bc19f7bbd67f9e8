"""Numbers every tolerance is built from, defined once: unit roundoffs per dtype, the safety factor and
the floor. The terms themselves, and their help text, are built in ``crosscheck._compare.terms``.
"""

from __future__ import annotations

#: Unit roundoff of each supported dtype (half an ulp of 1.0).
UNIT_ROUNDOFF = {"float32": 2.0**-24, "float64": 2.0**-53}
#: The float dtypes crosscheck judges (the keys of ``UNIT_ROUNDOFF``).
DTYPES = tuple(UNIT_ROUNDOFF)
#: Bits of significand: integer arithmetic below ``2**p`` is exact.
SIGNIFICAND_BITS = {"float32": 24, "float64": 53, "bfloat16": 8, "float16": 11}
#: The 16-bit dtypes the stack also judges: arrays stored (every product's result rounded) with this
#: unit roundoff, while the products accumulate in ``ACCUMULATION``'s dtype (JAX and PyTorch on CPU:
#: a bfloat16 or float16 matrix product sums in float32 and rounds its result once).
STORAGE_ROUNDOFF = {"bfloat16": 2.0**-8, "float16": 2.0**-11}
#: Where the products of each 16-bit dtype accumulate.
ACCUMULATION = {"bfloat16": "float32", "float16": "float32"}
#: Every dtype a ``--dtype`` choice may name (the stack judges all; a workload float32 and float64).
ALL_DTYPES = (*DTYPES, *STORAGE_ROUNDOFF)
#: The other precision of each dtype (a re-run there measures a candidate's rounding): a 16-bit case's
#: candidates are re-run in float32, the precision they accumulate in (its float64 difference is 2**-16
#: of the 16-bit rounding and smaller: nothing a tolerance could tell apart).
OTHER_DTYPE = {"float32": "float64", "float64": "float32", "bfloat16": "float32", "float16": "float32"}
#: float64 rounding per float32 rounding, to first order (``2**-53 / 2**-24 = 2**-29``).
WIDEN = UNIT_ROUNDOFF["float64"] / UNIT_ROUNDOFF["float32"]
#: Multiple of a rounding estimate an entry may differ by: of the modelled standard deviation (rounding
#: errors of a sum of many roundings are close to Gaussian; 8 standard deviations is never reached by
#: chance, p < 1e-15, while staying thousands of times tighter than the worst-case bound on deep
#: stacks), or of a measured difference plus its RMS.
SAFETY = 8.0
#: The floor: this many unit roundoffs of the largest reference entry, the precision no entry is asked
#: to beat.
FLOOR_ULPS = 8.0

#: The status of a port's module output row that differs while the model's output and every gradient
#: agree: the two implementations cut their modules differently there (``port.boundaries``); not a
#: failure, shown as such in the table.
BOUNDARY = "boundary"
