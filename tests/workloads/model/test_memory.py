"""A Workload's memory estimate (``GenericWorkload.memory``) is what its check uses (issue 38): the NumPy
memory a check allocates at its peak, traced, within the estimate, and the estimate at most 1.5 times it."""

from __future__ import annotations

import gc
import tracemalloc

import numpy as np
import pytest

import crosscheck
from crosscheck._workloads.registry import load_workload

N, M = 1024, 512


def _loss(p, i):
    return float(np.sum(np.tanh(i["x"] @ p["w"]) @ p["v"]))


def _grad(p, i):
    h = np.tanh(i["x"] @ p["w"])
    ones = np.ones((i["x"].shape[0], 8), h.dtype)
    return {"w": i["x"].T @ ((ones @ p["v"].T) * (1 - h * h)), "v": h.T @ ones}


def _grad_again(p, i):
    return _grad(p, i)


@pytest.mark.parametrize("oracle", [False, True], ids=["a backend as reference", "the oracle, screening"])
def test_the_estimate_covers_the_numpy_memory_a_check_uses(oracle):
    workload = crosscheck.Workload(
        name="tanh", parameters={"w": (N, M), "v": (M, 8)}, inputs={"x": (16, N)}, reference=_loss
    )
    backends = [_grad, _grad_again] if oracle else [_grad]
    case = (
        dict(backends=backends, oracle_mode="screen")
        if oracle
        else dict(backends=backends, reference=_grad_again)
    )
    gc.collect()  # what an earlier test left is not this check's
    tracemalloc.start()
    try:
        report = crosscheck.run(workload=workload, **case)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert report.passed, report.problems
    estimate = load_workload(workload).memory(
        dtype="float32", quantity="grad", options=None, candidates=backends
    )
    copies = 8 * (N * M + M * 8 + 16 * N)  # one float64 copy of every array
    assert peak <= estimate["arrays"], (peak / copies, estimate["arrays"] / copies)
    assert estimate["arrays"] <= 1.5 * peak, (peak / copies, estimate["arrays"] / copies)
