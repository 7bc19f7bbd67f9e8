"""One 16-bit verdict (``crosscheck._compare.low``): what a pass in bfloat16 or float16 cannot see, said
with the same words by every workload, the workload's own (what a bug moves, whether the rounding was
measured, the stack's unjudgeable entries) handed in; one ``is_low``."""

from __future__ import annotations

import numpy as np
import pytest
from paths import ROOT

from crosscheck._compare import low
from crosscheck._compare.dtypes import is_low
from crosscheck._compare.record import Comparison


def test_the_noise_is_the_typical_entry_s_term_relative_to_the_entry():
    term = {"a": np.array([1.0, 1.0, 5.0]), "b": np.array(2.0)}
    value = {"a": np.array([10.0, 0.0, 50.0]), "b": np.array([4.0, np.inf])}  # 0 and inf say nothing
    assert low.noise(term, value) == 0.1  # the median of 0.1, 0.1 and 0.5
    assert low.noise({"a": np.ones(2)}, {"a": np.zeros(2)}) == 0.0
    assert low.noise({}, {}) == 0.0


def _comparison(passed: bool) -> Comparison:
    return Comparison(
        backend="b", reference="r", passed=passed, status="ok" if passed else "mismatch", total=4
    )


def test_a_verdict_only_for_a_candidate_that_agrees():
    assert low.agrees([_comparison(True), _comparison(True)])
    assert not low.agrees([_comparison(True), _comparison(False)])
    assert not low.agrees([])


@pytest.mark.parametrize(
    ("kwargs", "said"),
    [
        (
            {
                "dtype": "bfloat16",
                "relative": 0.084,
                "moves": "entries",
                "aside": ", 72% of entries unjudgeable",
            },
            "agrees in bfloat16, within its rounding: a median 8.40% of an entry, 72% of entries "
            "unjudgeable; a bug that moves entries by less is not seen in bfloat16: check in float32 too "
            "(--dtype float32)",
        ),
        (
            {"dtype": "bfloat16", "relative": 0.3627, "moves": "the gradients", "measured": True},
            "agrees in bfloat16, within its rounding (measured: a median 36.27% of an entry); a bug that "
            "moves the gradients by less is not seen in bfloat16: check in float32 too (--dtype float32)",
        ),
        (
            {"dtype": "float16", "relative": 0.0, "moves": "entries"},
            "agrees in float16, within its rounding; a bug that moves entries by less is not seen in "
            "float16: check in float32 too (--dtype float32)",
        ),
        (
            {"dtype": "float32", "relative": 3.2e-6, "moves": "the gradients", "measured": True},
            "agrees in float32, within its rounding (measured: a median 3.2e-06 of an entry); a bug that "
            "moves the gradients by less is not seen in float32: check in float64 too (--dtype float64)",
        ),
    ],
    ids=["stack", "workload-measured", "not-known", "float32"],
)
def test_the_verdict_says_what_16_bits_cannot_see(kwargs, said):
    assert low.text(**kwargs) == said


def test_a_float32_and_a_16_bit_pass_say_what_they_hide_a_float64_one_nothing():
    assert [low.hides(d) for d in ("float32", "float64", "bfloat16", "float16")] == [True, False, True, True]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_caveat_quiet_keeps_is_the_one_the_verdict_ends_with(dtype):
    said = low.text(dtype, 1e-6, moves="the gradients")
    wider = "float64" if dtype == "float32" else "float32"
    end = f"check in {wider} too (--dtype {wider})"
    assert low.caveat(f"every gradient agrees; {said}") == (
        f"a bug that moves the gradients by less is not seen in {dtype}: {end}"
    )
    assert low.caveat("every gradient agrees") == ""


def test_one_is_low_and_one_verdict():
    assert [is_low(d) for d in ("float32", "float64", "bfloat16", "float16")] == [False, False, True, True]
    package = ROOT / "crosscheck"
    defines = [p for p in package.rglob("*.py") if "def is_low(" in p.read_text(encoding="utf-8")]
    assert [p.relative_to(ROOT).as_posix() for p in defines] == ["crosscheck/_compare/dtypes.py"]
    texts = [
        p for p in package.rglob("*.py") if "check in float32 too (--dtype" in p.read_text(encoding="utf-8")
    ]
    assert [p.relative_to(ROOT).as_posix() for p in texts] == ["crosscheck/_compare/low.py"]
