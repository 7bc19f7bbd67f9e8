"""The oracle's worker threads: every piece runs once, BLAS is held to one thread and restored."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import crosscheck
from crosscheck._workloads.stack import rounding
from crosscheck._workloads.stack.oracle import parallel as threads

threadpoolctl = pytest.importorskip("threadpoolctl")


def _blas_threads() -> list[int]:
    """Thread counts of the BLAS libraries the oracle's controller holds (NumPy's; others, loaded
    later by a framework, are not the oracle's)."""
    held = {lib.filepath for lib in threads.threadpools().lib_controllers}
    infos = threadpoolctl.threadpool_info()
    return [info["num_threads"] for info in infos if info["user_api"] == "blas" and info["filepath"] in held]


def test_every_piece_runs_once_and_results_come_back():
    seen = []
    results = sorted(threads.in_parallel(lambda i: seen.append(i) or i * i, range(20)))
    assert results == [i * i for i in range(20)]
    assert sorted(seen) == list(range(20))


def test_blas_is_single_threaded_inside_and_restored_after(monkeypatch):
    monkeypatch.setattr(threads, "workers", lambda: 2)
    before = _blas_threads()
    assert before
    inside = list(threads.in_parallel(lambda _: _blas_threads(), range(4)))
    assert all(all(n == 1 for n in counts) for counts in inside)
    assert _blas_threads() == before


def test_nested_pieces_run_serially_on_their_worker(monkeypatch):
    monkeypatch.setattr(threads, "workers", lambda: 2)

    def outer(_):
        mine = threading.get_ident()
        return {ident == mine for ident in threads.in_parallel(lambda _: threading.get_ident(), range(3))}

    assert all(same == {True} for same in threads.in_parallel(outer, range(4)))


def test_small_work_runs_in_the_callers_thread(monkeypatch):
    monkeypatch.setattr(threads, "workers", lambda: 2)
    mine = threading.get_ident()
    idents = set(threads.in_parallel(lambda _: threading.get_ident(), range(4), flops=1.0))
    assert idents == {mine}


def test_narrow_pieces_run_in_the_callers_thread(monkeypatch):
    monkeypatch.setattr(threads, "workers", lambda: 2)
    mine = threading.get_ident()
    narrow = threads.MIN_PARALLEL_WIDTH - 1
    assert set(threads.in_parallel(lambda _: threading.get_ident(), range(4), width=narrow)) == {mine}
    wide = set(threads.in_parallel(lambda _: threading.get_ident(), range(4), width=narrow + 1))
    assert mine not in wide


def test_an_exception_in_a_piece_is_raised_to_the_caller(monkeypatch):
    monkeypatch.setattr(threads, "workers", lambda: 2)

    def piece(i):
        if i == 3:
            raise ValueError("piece 3")
        return i

    with pytest.raises(ValueError, match="piece 3"):
        list(threads.in_parallel(piece, range(6)))


def test_the_oracle_gives_the_same_answer_on_one_or_several_threads(monkeypatch):
    weights, x = crosscheck.make_inputs(crosscheck.Case(layers=4, batch=6, dim=12, dtype="float64", seed=7))
    oracle = crosscheck.load_backend("numpy-fd")
    monkeypatch.setattr(threads, "MIN_PARALLEL_FLOPS", 0.0)
    monkeypatch.setattr(threads, "MIN_PARALLEL_WIDTH", 0)
    monkeypatch.setattr(threads, "workers", lambda: 1)
    serial = oracle.estimate(weights, x)
    monkeypatch.setattr(threads, "workers", lambda: 3)
    parallel = oracle.estimate(weights, x)
    for name in ("step", "kink", "kink_at"):
        np.testing.assert_array_equal(getattr(parallel, name), getattr(serial, name))
    # The same sums, possibly blocked differently by BLAS: equal to within the error bars.
    assert np.all(np.abs(parallel.value - serial.value) <= np.minimum(parallel.error, serial.error))


def test_omp_num_threads_caps_the_workers(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert threads.workers() == 1
    monkeypatch.setenv("OMP_NUM_THREADS", "not a number")
    assert threads.workers() >= 1


def test_beside_runs_on_another_thread_and_hands_back_its_result(monkeypatch):
    monkeypatch.setattr(threads, "workers", lambda: 2)
    mine = threading.get_ident()
    narrow, big = threads.MIN_PARALLEL_WIDTH - 1, threads.MIN_BESIDE_FLOPS

    def work():
        # Inside, BLAS is on one thread and pieces run serially, on this thread.
        here = threading.get_ident()
        idents = set(threads.in_parallel(lambda _: threading.get_ident(), range(3)))
        return here, idents, _blas_threads()

    with threads.single_threaded_blas(), threads.beside(work, width=narrow, flops=big) as wait:
        here, idents, blas = wait()
    assert here != mine
    assert idents == {here}
    assert all(n == 1 for n in blas)


@pytest.mark.parametrize(
    ("workers", "width", "flops", "inside"),
    [
        (1, 8, np.inf, False),  # one core
        (2, threads.MIN_PARALLEL_WIDTH, np.inf, False),  # the caller's own pieces use every core
        (2, 8, threads.MIN_BESIDE_FLOPS / 2, False),  # too little work to hand the GIL back and forth
        (2, 8, np.inf, True),  # inside an in_parallel piece: one level of threads
    ],
    ids=["one-core", "wide", "small", "nested"],
)
def test_beside_runs_in_the_callers_thread_when_a_second_thread_cannot_help(
    monkeypatch, workers, width, flops, inside
):
    monkeypatch.setattr(threads, "workers", lambda: workers)
    if inside:
        monkeypatch.setattr(threads._inside, "active", True, raising=False)
    ran = []
    with threads.beside(lambda: ran.append(threading.get_ident()) or 7, width=width, flops=flops) as wait:
        assert ran == []  # nothing runs before the wait
        assert wait() == 7
    assert ran == [threading.get_ident()]


def test_an_exception_beside_is_raised_at_the_wait(monkeypatch):
    monkeypatch.setattr(threads, "workers", lambda: 2)

    def work():
        raise ValueError("beside")

    with pytest.raises(ValueError, match="beside"), threads.beside(work, width=8, flops=np.inf) as wait:
        wait()


def test_work_beside_has_ended_when_the_callers_block_fails(monkeypatch):
    # An exception in the caller (a progress callback, Ctrl-C) leaves the block only once the work
    # beside it has ended: its BLAS limit must not outlive the caller's.
    monkeypatch.setattr(threads, "workers", lambda: 2)
    go, ended = threading.Event(), []

    def work():
        go.wait()
        total = sum(float(np.sum(np.ones(1000))) for _ in range(200))
        ended.append(total)

    def caller():
        with threads.beside(work, width=8, flops=np.inf):
            go.set()
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        caller()
    assert ended == [200000.0]


def test_the_oracle_gives_the_same_bits_with_its_rounding_model_beside_or_after(monkeypatch):
    weights, x = crosscheck.make_inputs(crosscheck.Case(layers=4, batch=6, dim=12, dtype="float64", seed=7))
    oracle = crosscheck.load_backend("numpy-fd")
    monkeypatch.setattr(threads, "workers", lambda: 2)
    monkeypatch.setattr(threads, "MIN_BESIDE_FLOPS", np.inf)
    after = oracle.estimate(weights, x)
    monkeypatch.setattr(threads, "MIN_BESIDE_FLOPS", 0.0)
    model, made_on = rounding.rounding_model, []

    def spy(*args, **kwargs):
        made_on.append(threading.get_ident())
        return model(*args, **kwargs)

    monkeypatch.setattr(rounding, "rounding_model", spy)
    beside = oracle.estimate(weights, x)
    assert made_on and threading.get_ident() not in made_on  # it did run beside
    for name in ("value", "error", "step", "kink", "kink_at"):
        np.testing.assert_array_equal(getattr(beside, name), getattr(after, name))
    np.testing.assert_array_equal(beside.rounding.grad_sigma, after.rounding.grad_sigma)


def test_the_model_oracle_holds_every_pool_loaded_when_it_evaluates():
    # fd.threads.one_thread looks the libraries up at each call: PyTorch's OpenMP pool, loaded after
    # the stack's cached controller was made, is held to one thread too, and restored after.
    torch = pytest.importorskip("torch")
    from crosscheck._workloads.model.oracle.one_thread import one_thread

    threads.threadpools()  # a controller cached before anything else is loaded changes nothing
    before = torch.get_num_threads()
    with one_thread():
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before


def test_the_model_oracle_leaves_the_threads_of_a_model_of_real_size():
    # From `MANY` parameters an evaluation is a forward pass of real size: its threads pay (issue 38),
    # and the notes say which was done.
    torch = pytest.importorskip("torch")
    from crosscheck._workloads.model.oracle.one_thread import (
        MANY,
        MANY_THREADS,
        THREADS,
        one_thread,
        threads_note,
    )

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with one_thread(MANY - 1):
            assert torch.get_num_threads() == 1
        with one_thread(MANY):
            assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
    assert (threads_note(MANY - 1), threads_note(MANY)) == (THREADS, MANY_THREADS)
