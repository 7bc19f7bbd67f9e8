"""A port candidate's verdict in words (``say``): where it starts, the comparisons behind it, the notes and
caveats, what a 16-bit pass hides, and a side that computed wider, each said once."""

from __future__ import annotations

import pytest

from crosscheck._compare import low
from crosscheck._compare.record import Comparison
from crosscheck._report.report import Verdict
from crosscheck._workloads.port.judge.say import behind, said
from crosscheck._workloads.port.judge.verdict import Located, Origin

NOWHERE = Origin("nowhere", None, None, (), "every module's output and every gradient agree")
FORWARD = Origin("forward", "b", "b", (), "the forward pass differs first at `b` (Linear)")
BACKWARD = Origin("gradient", "a", "a", (), "forward agrees; the gradient differs first at `a`")


@pytest.mark.parametrize(
    ("origin", "reference", "forward", "text"),
    [
        (FORWARD, "torch", False, ""),
        (Origin("unknown", None, None, (), "not compared"), "torch", False, ""),
        (BACKWARD, "torch", False, " (`jax` vs `torch`: module outputs and gradients)"),
        (BACKWARD, "numpy-fd", False, " (`jax` vs `torch`: module outputs; `jax` vs `numpy-fd`: gradients)"),
        (NOWHERE, "torch", True, " (`jax` vs `torch`: module outputs)"),
    ],
    ids=["forward", "unknown", "with-torch", "with-the-oracle", "forward-check"],
)
def test_the_comparisons_behind_a_verdict(origin, reference, forward, text):
    assert behind(origin, "jax", reference, forward=forward) == text


def test_the_notes_and_caveats_follow_the_origin():
    broadcast = "every entry, after broadcasting (1, 3)"
    row = Comparison("jax", "torch", True, "ok", 3, parameter="wpe (output)", coverage=broadcast)
    located = Located([row], BACKWARD, "; a caveat")
    found = said("jax", located, "torch", forward=False, low=None, wider={}, dtype="float32")
    assert found.starts_in == "gradient" and found.module == "a"
    assert found.text == (
        f"{BACKWARD.text} (`jax` vs `torch`: module outputs and gradients); compared after broadcasting one "
        "side's output to the other's shape (same values, e.g. a (1, S, H) position embedding against a "
        "(B, S, H) one): `wpe (output)`; a caveat"
    )


def test_a_16_bit_pass_says_what_it_hides_and_a_wider_side_once():
    hides = Verdict("agrees in bfloat16, within its rounding")
    wide_only = low.wide_only("torch", "bfloat16")
    located = Located([], NOWHERE)
    kw = {"forward": False, "wider": {"torch": True, "jax": False}, "dtype": "bfloat16"}
    found = said("jax", located, "torch", low=hides, **kw)
    assert found.text.endswith(f"; {hides.text}; {wide_only}")
    assert said("jax", Located([], FORWARD), "torch", low=hides, **kw).text == f"{FORWARD.text}; {wide_only}"
