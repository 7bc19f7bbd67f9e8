"""Planted bugs: every one must be caught by the driver, with a message that says what is wrong."""

from __future__ import annotations

import numpy as np
import planted
import pytest

import crosscheck


def _check(fn, **case):
    report = crosscheck.run(backends=[fn], **case)
    (comparison,) = report.comparisons or [None]
    return report, comparison


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("init", ["gaussian", "integer", "identity"])
def test_correct_numpy_gradient_passes(dtype, init):
    report, comparison = _check(planted.correct, layers=8, batch=4, dim=6, dtype=dtype, init=init, seed=3)
    assert report.passed, comparison.message
    assert comparison.mismatched == 0 and comparison.judged > 0


BUGS = [
    (planted.no_last_relu, "gaussian"),
    (planted.mean_not_sum, "gaussian"),
    (planted.transposed, "gaussian"),
    (planted.layers_reversed, "gaussian"),
    (planted.relu_derivative_one_at_zero, "integer"),
    (planted.off_at_largest(1e-3), "gaussian"),
]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize(("bug", "init"), BUGS, ids=[b.__name__ for b, _ in BUGS])
def test_numeric_bug_is_caught(bug, init, dtype):
    report, comparison = _check(bug, layers=8, batch=6, dim=6, dtype=dtype, init=init, seed=5)
    assert not report.passed
    assert comparison.status == "mismatch" and comparison.mismatched >= 1
    assert comparison.message.startswith("Mismatched elements: ")
    assert "Greatest absolute difference" in comparison.message


def test_gradient_with_respect_to_x_is_caught_as_wrong_shape():
    report, comparison = _check(planted.wrt_x, layers=3, batch=5, dim=4)
    assert not report.passed and comparison.status == "invalid"
    assert comparison.message == "wrong shape: expected (3, 4, 4), found (5, 4)."


def test_gradient_with_respect_to_x_is_caught_even_when_shapes_coincide():
    # With L = 1 and N = d, dloss/dx has the weights' shape; the numbers still give it away.
    report, comparison = _check(planted.wrt_x, layers=1, batch=4, dim=4)
    assert not report.passed and comparison.mismatched > 0


def test_nan_is_a_failure_naming_where():
    report, comparison = _check(planted.one_nan, layers=3, batch=2, dim=3)
    assert not report.passed and comparison.status == "invalid"
    assert (
        comparison.message
        == "non-finite gradient: 1 of 27 entries are NaN or infinite, the first at (2, 0, 0)."
    )


def test_float32_result_for_a_float64_case_is_a_dtype_failure():
    report, comparison = _check(planted.float32_always, layers=3, batch=2, dim=3, dtype="float64")
    assert not report.passed
    assert comparison.message == "wrong dtype: expected float64 (the case's dtype), found float32."


def test_integer_case_with_exact_zeros_is_judged_not_skipped():
    # Exact zeros computed exactly are not ambiguous: the convention applies and entries are judged.
    report, comparison = _check(planted.correct, layers=8, batch=8, dim=8, init="integer", seed=1)
    assert report.passed
    assert comparison.unjudgeable == 0
    assert report.backends["numpy-fd"].notes["kink_entries"] > 0  # the oracle did sit on kinks


def test_mismatch_message_format():
    _, comparison = _check(planted.off_at_largest(1e-2), layers=2, batch=2, dim=2, seed=0)
    lines = comparison.message.splitlines()
    assert lines[0] == "Mismatched elements: 1 / 8 (12.5%)"
    assert lines[1].startswith("Greatest absolute difference: ")
    assert lines[1].endswith(f"at (layer, row, col) {_fmt(comparison.max_abs_diff_index)}")
    assert lines[2].startswith("Greatest relative difference: 0.00999")
    assert lines[2].endswith(f"at (layer, row, col) {_fmt(comparison.max_rel_diff_index)}")
    assert lines[3].startswith(f"Worst entry {_fmt(comparison.worst_index)}: off_by_0.01_at_largest ")
    assert "x the tolerance" in lines[3] and "decided by " in lines[3]
    for term in ("rounding", "reference", "floor", "slack"):
        assert f" {term} " in lines[3]


def _fmt(index):
    return "(" + ", ".join(map(str, index)) + ")"


def test_user_slack_is_added_and_reported():
    bug = planted.off_at_largest(1e-3)
    strict_report, _ = _check(bug, layers=3, batch=4, dim=4, seed=2)
    loose_report, comparison = _check(bug, layers=3, batch=4, dim=4, seed=2, rtol=2e-3, atol=0.0)
    assert not strict_report.passed and loose_report.passed
    assert comparison.worst_terms["slack"] > 0


def test_rtol_without_atol_is_an_error():
    with pytest.raises(ValueError, match="`rtol` and `atol` must be given together"):
        crosscheck.run(layers=2, dim=2, rtol=1e-3)


def test_every_entry_unjudgeable_fails_loudly():
    # A float32 stack whose every pre-activation is ~1e-9: float32 cannot know any sign.
    weights = np.full((2, 2, 2), 1e-9, np.float32) * np.array([1, -1], np.float32)
    x = np.ones((1, 2), np.float32)
    report = crosscheck.run(weights=weights, x=x, backends=[planted.correct])
    (comparison,) = report.comparisons
    assert comparison.status in ("unjudgeable", "ok")
    if comparison.status == "unjudgeable":
        assert not report.passed
        assert comparison.message.startswith("All 8 entries are unjudgeable")


def test_strict_fails_on_unjudgeable_entries():
    case = {"layers": 8, "batch": 8, "dim": 16, "init": "nearzero", "seed": 8}
    report, comparison = _check(planted.correct, **case)
    assert report.passed and comparison.unjudgeable > 0
    strict = crosscheck.run(backends=[planted.correct], strict=True, **case)
    assert not strict.passed
    assert any("unjudgeable" in p for p in strict.problems)
