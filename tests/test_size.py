"""Sizes that cannot fit are refused before anything is allocated (``_workloads/stack/size.py``,
``crosscheck._engine.run.check_memory``), and the rounding model's memory is bounded (``model_chunk``)."""

from __future__ import annotations

import time
import tracemalloc

import hostile
import numpy as np
import pytest

import crosscheck
from crosscheck._cli.main import main
from crosscheck._engine.run import MemoryTooLarge
from crosscheck._workloads.stack import model as _stack
from crosscheck._workloads.stack.case import Case, make_inputs
from crosscheck._workloads.stack.screen import full_oracle_flops
from crosscheck._workloads.stack.size import estimate

TOO_BIG = {
    "dim": ["--dim", "100000"],
    "layers": ["--layers", "1000000000"],
    "batch": ["--batch", "100000000000"],
    "directions": ["--directions", "100000000", "--oracle-mode", "screen"],
}


@pytest.mark.parametrize("kind", list(TOO_BIG), ids=list(TOO_BIG))
def test_a_case_that_cannot_fit_is_refused_with_its_estimate(kind, capsys):
    start = time.monotonic()
    assert main(["run", *TOO_BIG[kind], "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert "this case needs about" in err and "this machine has available; make it smaller" in err, err
    assert time.monotonic() - start < 10, "it worked on the case before refusing it"


def test_a_size_that_is_not_an_integer_is_a_usage_error(capsys):
    assert main(["run", "--batch", "1e11"]) == 2
    assert "argument --batch: invalid int value: '1e11'" in capsys.readouterr().err


def test_the_api_refuses_it_before_allocating():
    tracemalloc.start()
    try:
        with pytest.raises(MemoryTooLarge, match=r"this case needs about .* TiB of memory"):
            crosscheck.run(dim=100_000, backends=["torch"])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 50 * 2**20, f"{peak / 2**20:.0f} MiB allocated before refusing"


def test_a_users_workload_that_cannot_fit_is_refused():
    huge = crosscheck.Workload(
        name="huge",
        parameters={"w": (100_000, 100_000)},
        inputs={"x": (8, 100_000)},
        reference=lambda p, i: float(np.sum((i["x"] @ p["w"]) ** 2)),
    )
    with pytest.raises(MemoryTooLarge, match=r"\(arrays .* TiB\)"):
        crosscheck.run(workload=huge, backends=[lambda p, i: {"w": p["w"]}])


def test_a_large_case_says_how_much_memory_it_needs(monkeypatch, capsys):
    monkeypatch.setattr("crosscheck._cli.run.MEMORY_NOTE_BYTES", 1)
    assert (
        main(["run", "--layers", "2", "--batch", "2", "--dim", "2", "--backend", "numpy-fd", "--quiet"]) == 0
    )
    assert "crosscheck: this case needs about " in capsys.readouterr().err


@pytest.mark.parametrize(
    ("layers", "batch", "dim", "mode"),
    [(4, 8, 64, "full"), (3, 64, 32, "full"), (3, 4, 96, "screen")],
    ids=["wide", "tall", "screened"],
)
def test_the_estimate_covers_what_a_run_allocates(layers, batch, dim, mode):
    """``tracemalloc`` sees NumPy's allocations: the estimate (without the frameworks' part, none
    here) is above the run's peak, and not wildly so."""

    def mine(weights, x):
        return hostile.stack_grad(weights, x).astype(weights.dtype)

    tracemalloc.start()
    try:
        report = crosscheck.run(layers=layers, batch=batch, dim=dim, backends=[mine], oracle_mode=mode)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert report.passed, report.problems
    parts = estimate(layers=layers, batch=batch, dim=dim, dtype="float32", oracle_mode=mode, frameworks=0)
    assert peak < sum(parts.values()) < 4 * peak, (peak, parts)


def test_the_rounding_model_in_chunks_is_the_same_bit_for_bit(monkeypatch):
    weights, x = make_inputs(Case(layers=3, batch=4, dim=16, seed=2))
    fwd = _stack.forward(weights, x)
    deltas, _ = _stack.backward(fwd)
    directions = np.random.default_rng(0).choice([-1.0, 1.0], size=(3, 2, 16, 16))
    whole = _stack.rounding_model(fwd, deltas, "float32", directions=directions)
    monkeypatch.setattr(_stack, "MODEL_CHUNK_VALUES", 16 * 16 * 5)  # 5 samples at a time
    assert _stack.model_chunk(_stack.MODEL_SAMPLES, 16) == 5
    chunked = _stack.rounding_model(fwd, deltas, "float32", directions=directions)
    assert np.array_equal(whole.grad_sigma, chunked.grad_sigma)
    assert np.array_equal(whole.direction_sigma, chunked.direction_sigma)


def test_a_wide_layer_never_has_all_its_samples_in_memory():
    assert _stack.model_chunk(_stack.MODEL_SAMPLES, 3000) * 3000 * 3000 <= _stack.MODEL_CHUNK_VALUES
    assert _stack.model_chunk(_stack.MODEL_SAMPLES, 16) == _stack.MODEL_SAMPLES


@pytest.mark.parametrize(("layers", "batch", "dim"), [(1, 1, 1), (8, 8, 16), (5, 3, 7)])
def test_the_full_oracles_flops_in_closed_form(layers, batch, dim):
    summed = sum(2 * dim * dim * (layers - 1 - k) * 2 * batch * dim * dim for k in range(layers))
    assert full_oracle_flops(layers, batch, dim) == float(summed)
