"""Sizes that cannot fit are refused before anything is allocated (``_workloads/stack/size.py``,
``crosscheck._engine.plan.check_memory``), and the rounding model's memory does not
grow with its samples times a layer's entries."""

from __future__ import annotations

import tracemalloc

import hostile
import numpy as np
import pytest

import crosscheck
from crosscheck._cli.main import main
from crosscheck._engine.plan import MemoryTooLarge
from crosscheck._workloads.stack import rounding, size
from crosscheck._workloads.stack.case import Case, make_inputs
from crosscheck._workloads.stack.forward import backward, forward
from crosscheck._workloads.stack.judge.cost import full_oracle_flops
from crosscheck._workloads.stack.size import estimate

TOO_BIG = {
    "dim": ["--dim", "100000"],
    "layers": ["--layers", "1000000000"],
    "batch": ["--batch", "100000000000"],
    "directions": ["--directions", "100000000", "--oracle-mode", "screen"],
}


@pytest.mark.parametrize("kind", list(TOO_BIG), ids=list(TOO_BIG))
def test_a_case_that_cannot_fit_is_refused_with_its_estimate(kind, capsys):
    tracemalloc.start()
    try:
        assert main(["run", *TOO_BIG[kind], "--quiet"]) == 2
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert "this case needs about" in err and "this machine has available; make it smaller" in err, err
    assert peak < 2**30, f"{peak / 2**20:.0f} MiB allocated before refusing: it worked on the case"


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
        parameters={"w": (200_000, 200_000)},
        inputs={"x": (8, 200_000)},
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
    [(4, 8, 64, "full"), (3, 64, 32, "full"), (3, 4, 96, "screen"), (8, 8, 128, "outputs")],
    ids=["wide", "tall", "screened", "outputs"],
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
    # A screen may check any layer entry by entry: the estimate counts that, so it is held to the
    # peak of the full oracle on the same case.
    worst = peak if mode != "screen" else _peak(layers, batch, dim, "full", mine)
    assert peak < sum(parts.values()) < 4 * worst, (peak, worst, parts)


def _peak(layers, batch, dim, mode, backend) -> int:
    tracemalloc.start()
    try:
        crosscheck.run(layers=layers, batch=batch, dim=dim, backends=[backend], oracle_mode=mode)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_wide_layer_never_has_all_its_samples_in_memory():
    # 64 samples of a (512, 512) gradient would be 128 MiB; the model sums their squares row by row.
    weights, x = make_inputs(Case(layers=1, batch=1, dim=512, seed=2))
    fwd = forward(weights, x)
    deltas, _ = backward(fwd)
    tracemalloc.start()
    try:
        rounding.rounding_model(fwd, deltas, "float32")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < rounding.MODEL_SAMPLES * 512 * 512 * 8 / 4, peak


@pytest.mark.parametrize(("layers", "batch", "dim"), [(1, 1, 1), (8, 8, 16), (5, 3, 7)])
def test_the_full_oracles_flops_in_closed_form(layers, batch, dim):
    summed = sum(2 * dim * dim * (layers - 1 - k) * 2 * batch * dim * dim for k in range(layers))
    assert full_oracle_flops(layers, batch, dim) == float(summed)


@pytest.mark.parametrize(
    ("layers", "batch", "dim", "init"),
    [(8, 8, 192, "gaussian"), (8, 8, 256, "nearzero")],
    ids=["no-kinks", "unjudgeable-entries"],
)
def test_a_screen_that_checks_no_layer_entry_by_entry_is_estimated_as_what_it_allocates(
    layers, batch, dim, init, monkeypatch
):
    """Past ``cost.ESCALATE_FLOPS`` (here: always) a screen never runs the full oracle: its estimate
    is the screen's arrays, above the run's peak and within twice it (it counted the full oracle's
    ~60 arrays of ``(L, d, d)`` float64: 20 GiB printed at d = 2048, where a run peaks at 7.2 GiB)."""
    from crosscheck._workloads.stack.judge import cost

    monkeypatch.setattr(cost, "ESCALATE_FLOPS", 0.0)

    def mine(weights, x):
        return hostile.stack_grad(weights, x).astype(weights.dtype)

    tracemalloc.start()
    try:
        report = crosscheck.run(
            layers=layers, batch=batch, dim=dim, init=init, backends=[mine], oracle_mode="screen"
        )
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert report.passed, report.problems
    assert (report.comparisons[0].unjudgeable > 0) is (init == "nearzero")
    parts = estimate(layers=layers, batch=batch, dim=dim, dtype="float32", oracle_mode="screen", frameworks=0)
    assert peak < sum(parts.values()) < 2 * peak, (peak, parts)


@pytest.mark.parametrize(
    ("dim", "mode"), [(64, "full"), (1024, "outputs"), (2048, "outputs"), (4096, "screen")]
)
def test_auto_is_estimated_as_the_mode_it_takes(dim, mode, monkeypatch):
    monkeypatch.setattr(size, "available_memory", lambda: 2**40)
    sizes = {"layers": 8, "batch": 8, "dim": dim, "dtype": "float32"}
    assert size.auto_mode(8, 8, dim, "float32") == mode
    assert estimate(**sizes, oracle_mode="auto") == estimate(**sizes, oracle_mode=mode)


def test_auto_screens_where_the_outputs_oracle_would_not_fit_this_machine(monkeypatch):
    sizes = {"layers": 8, "batch": 8, "dim": 1024, "dtype": "float32"}
    needs = sum(estimate(**sizes, oracle_mode="outputs", candidates=2, frameworks=2).values())
    monkeypatch.setattr(size, "available_memory", lambda: needs)
    assert size.auto_mode(8, 8, 1024, "float32") == "outputs"
    monkeypatch.setattr(size, "available_memory", lambda: needs - 1)
    assert size.auto_mode(8, 8, 1024, "float32") == "screen"
    assert estimate(**sizes, oracle_mode="auto") == estimate(**sizes, oracle_mode="screen")
    # d = 4096: past the outputs oracle's budget, and about 49 GiB (its own 9.9 GiB and the full
    # comparison's arrays), nearly three times the screen's: the screen, whatever the machine.
    wide = {**sizes, "dim": 4096}
    outputs, screen = (sum(estimate(**wide, oracle_mode=mode).values()) for mode in ("outputs", "screen"))
    assert 32 * 2**30 < outputs and 2 * screen < outputs
