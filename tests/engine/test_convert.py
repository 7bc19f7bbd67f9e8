"""A backend's result is converted a tensor at a time (issue 38): each array it returned is dropped once
its private copy is made, in process (``Caller``) and in an isolate worker (``isolate_worker._serve``),
so that a result the backend does not keep never lies beside all of its copies. Measured as traced NumPy
memory (deterministic): at most the copies and one tensor of the result."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from crosscheck._engine.caller import Caller
from crosscheck._engine.process.isolate_worker import _serve

N = 512
TENSOR = 8 * N * N


class _Fresh:
    """A backend whose results are its own arrays, made for the call and not kept."""

    def grad(self, x):
        return {k: np.full((N, N), float(i)) for i, k in enumerate("abcd")}

    def listed(self, x):
        return tuple(np.full((N, N), float(i)) for i in range(4))


def _traced(fn):
    tracemalloc.start()
    try:
        value = fn()
        kept, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return value, kept / TENSOR, peak / TENSOR


def test_in_process_a_result_is_converted_a_tensor_at_a_time():
    call = Caller({"x": np.zeros(3)})
    out, kept, peak = _traced(lambda: call(_Fresh().grad, call.arrays["x"], convert="arrays"))
    assert out.error is None and [float(out.value[k][0, 0]) for k in "abcd"] == [0.0, 1.0, 2.0, 3.0]
    assert kept == pytest.approx(4.0, abs=0.01) and peak < 5.05, (kept, peak)


@pytest.mark.parametrize("method", ["grad", "listed"])
def test_in_a_worker_a_result_is_converted_a_tensor_at_a_time(method):
    request = {"args": [np.zeros(3)], "kwargs": {}, "names": ["x"], "method": method, "contexts": []}
    out, kept, peak = _traced(lambda: _serve(_Fresh(), request))
    values = out["value"].values() if isinstance(out["value"], dict) else out["value"]
    assert out["error"] is None and [float(v[0, 0]) for v in values] == [0.0, 1.0, 2.0, 3.0]
    assert kept == pytest.approx(4.0, abs=0.01) and peak < 5.05, (kept, peak)  # was 8: all, twice
