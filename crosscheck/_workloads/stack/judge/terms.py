"""What each term of the stack's tolerances means (a comparison's ``tolerance_sources``), handed to
``compare`` by the stack's judges; the rounding and floor are said by ``crosscheck._compare.terms``, which
builds them, ``slack`` means the same for every workload (``terms.TERM_HELP``), the HVP's ``rerun`` is
said with how it was measured (``oracle.hvp.RERUN_HELP``)."""

from __future__ import annotations

from crosscheck._compare import terms

TERM_HELP = {
    "rounding": terms.modelled_help("what the candidate's own rounding can produce on this case"),
    "reference": "the reference's own error (the oracle's error bar, or the reference's rounding)",
    "floor": terms.floor_help(
        "the largest reference entry",
        ulps=terms.SAFETY_FLOOR_ULPS,
        then=": the precision no entry is asked to beat",
    ),
    "kinks": "the summed effect of ReLU flips too small to judge the entry on both sides",
    "underflow": (
        "the smallest normal number times what the arithmetic amplifies it by, where values can fall "
        "below it (flushed to zero, or rounded to a subnormal); shown only when a case reaches that range"
    ),
}
