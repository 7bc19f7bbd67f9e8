"""One side's module records at the case's dtype and re-run in the other (``capture.runs``): a capture
that fails at the case's dtype is a problem in words; a re-run that fails leaves the records without
their re-run, and says why; records captured already are only re-run."""

from __future__ import annotations

import types

import numpy as np

from crosscheck._workloads.port.judge import capture
from crosscheck._workloads.port.judge.localize import Runs


class _Call:
    """A guarded call that returns ``outcomes`` in turn and logs the dtypes it was asked to cast to."""

    def __init__(self, *outcomes: tuple[object, str | None]) -> None:
        self.outcomes, self.cast_to = list(outcomes), []

    def cast(self, arrays, dtype):
        self.cast_to.append(dtype)
        return arrays

    def __call__(self, fn, *args):
        value, error = self.outcomes.pop(0)
        return types.SimpleNamespace(value=value, error=error)


POINT = types.SimpleNamespace(params={"w": np.zeros(2)}, inputs={}, dtype="float32")
WORKLOAD = types.SimpleNamespace(prepared=None)


def test_both_dtypes_captured():
    call = _Call(("main", None), ("other", None))
    assert capture.runs(call, WORKLOAD, POINT, torch=True) == Runs("main", "other")
    assert call.cast_to == ["float32", "float32", "float64", "float64"]


def test_a_failure_at_the_cases_dtype_is_the_problem_in_words():
    call = _Call((None, "raised ValueError"))
    assert capture.runs(call, WORKLOAD, POINT, torch=True) == "PyTorch forward in float32: raised ValueError"


def test_a_failed_re_run_leaves_the_records_and_says_why():
    call = _Call(("main", None), (None, "no float64 kernel"))
    found = capture.runs(call, WORKLOAD, POINT, torch=True)
    assert found == Runs("main", (), "PyTorch forward in float64: no float64 kernel")


def test_records_captured_already_are_only_re_run():
    call = _Call(("other", None))
    assert capture.runs(call, WORKLOAD, POINT, torch=True, main="main") == Runs("main", "other")
    assert call.cast_to == ["float64", "float64"]
