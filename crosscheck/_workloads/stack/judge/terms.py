"""What each term of the stack's tolerances means (a comparison's ``tolerance_sources``), handed to
``compare`` by the stack's judges; ``slack`` means the same for every workload
(``crosscheck._compare.constants.TERM_HELP``), the HVP's ``rerun`` is said with how it was measured
(``oracle.hvp.RERUN_HELP``)."""

from __future__ import annotations

TERM_HELP = {
    "rounding": "what the candidate's own rounding can produce on this case (modelled, x8 sigma)",
    "reference": "the reference's own error (the oracle's error bar, or the reference's rounding)",
    "floor": "8 unit roundoffs of the largest reference entry: the precision no entry is asked to beat",
    "kinks": "the summed effect of ReLU flips too small to judge the entry on both sides",
    "underflow": (
        "the smallest normal number times what the arithmetic amplifies it by, where values can fall "
        "below it (flushed to zero, or rounded to a subnormal); shown only when a case reaches that range"
    ),
}
