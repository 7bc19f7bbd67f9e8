"""What the gradient judge says of a passing candidate (``judge/verdict.py``): on a device with a unit
roundoff of its own, what that arithmetic hides (before what a 16-bit dtype cannot see); in a 16-bit
dtype, its rounding against the reference's answer at every entry; of a failing candidate, nothing."""

from __future__ import annotations

import numpy as np
import pytest

from crosscheck._compare.device import Arithmetic
from crosscheck._compare.record import Comparison
from crosscheck._workloads.stack.judge.answers import GradAnswer
from crosscheck._workloads.stack.judge.passes import Passes
from crosscheck._workloads.stack.judge.verdict import said
from crosscheck._workloads.stack.workload import Stack

POINT = Stack(layers=3, batch=4, dim=6).point(dtype="bfloat16", seed=1)
TPU = Arithmetic(platform="tpu", precision="default", framework="jax")


def _passes() -> Passes:
    return Passes.of(POINT.params["weights"], POINT.inputs["x"])


def _comparison(status: str = "ok", unjudgeable: int = 0) -> Comparison:
    return Comparison(
        backend="mine",
        reference="numpy-fd",
        passed=status == "ok",
        status=status,
        total=108,
        unjudgeable=unjudgeable,
    )


def _answer(passes: Passes) -> GradAnswer:
    value = np.asarray(passes.fwd.weights, np.float64) + 1.0
    return GradAnswer(value, np.zeros(value.shape))


def test_a_16_bit_pass_says_its_rounding_against_every_entry_and_the_unjudgeable_share():
    passes = _passes()
    found = said(_comparison(unjudgeable=27), "bfloat16", None, passes, _answer(passes))
    assert found is not None and not found.fails
    assert found.text.startswith("agrees in bfloat16, within its rounding: a median ")
    assert ", 25% of entries unjudgeable (ReLUs bfloat16 rounding may flip)" in found.text
    screened = said(_comparison(), "bfloat16", None, passes, None)  # a screen: no size to say
    assert screened is not None and screened.text.startswith("agrees in bfloat16, within its rounding; ")


def test_a_device_with_its_own_unit_says_what_it_hides_before_the_dtype():
    passes = _passes()
    for dtype, answer in (("float32", None), ("bfloat16", _answer(passes))):
        found = said(_comparison(), dtype, TPU, passes, answer)
        assert found is not None and found.text == TPU.hides()


@pytest.mark.parametrize("status", ["mismatch", "invalid", "unjudgeable"])
def test_a_candidate_that_did_not_pass_gets_no_verdict(status):
    passes = _passes()
    assert said(_comparison(status), "bfloat16", TPU, passes, _answer(passes)) is None


def test_float32_on_a_cpu_has_nothing_to_add():
    assert said(_comparison(), "float32", None, _passes(), None) is None
    assert said(_comparison(), "float32", Arithmetic(), _passes(), None) is None
