"""The oracle's independent pieces on every core: one worker thread per core, BLAS held to one thread.

The oracle's work is many independent pieces (the entries of a layer, the nodes of an HVP), each a
series of NumPy operations on blocks of a few MiB. NumPy releases the GIL in its loops and in BLAS, so
threads run such pieces in parallel, elementwise work included, which a multithreaded BLAS alone never
parallelizes. BLAS's own threads are held to one meanwhile (``threadpoolctl``; restored after): on these
products (tall ``(rows, d) @ (d, d)``) they gain little on an idle machine and, when other processes
share the cores, their spin-waits made the oracle four times slower than one thread (measured here on 2
cores). Without ``threadpoolctl`` the pieces run one after the other with BLAS as configured.

A piece that itself asks for parallel work (an HVP node running the gradient oracle) runs it serially:
one level of threads, never nested pools.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Any, TypeVar

import numpy as np

from crosscheck._workloads.threadpools import threadpools, workers

T = TypeVar("T")
R = TypeVar("R")

_inside = threading.local()


@contextlib.contextmanager
def single_threaded_blas() -> Iterator[None]:
    """A context in which BLAS runs on one thread (as configured again after); nothing without
    ``threadpoolctl``."""
    controller = threadpools()
    if controller is None:
        yield
        return
    with controller.limit(limits=1, user_api="blas"):
        yield


#: Below this many flops of work in all, threads cost more (~10 ms to start) than they save.
MIN_PARALLEL_FLOPS = 2e7
#: Below this width the oracle's pieces run serially: their NumPy calls (products of ``(rows, d)``
#: blocks, checks of each row's masks) are so short that threads spend their time handing the GIL to
#: each other. Measured on 2 cores, the full gradient oracle (N = 8): d = 64, 127 ms on one thread and
#: 133 ms on two; d = 80, 283 and 221 ms; d = 128, 1.12 and 0.74 s; the full HVP oracle at d = 64,
#: 3.8 s on one and 4.5 s on two.
MIN_PARALLEL_WIDTH = 72


def blas_on_one_thread(fn: Callable[..., R]) -> Callable[..., R]:
    """Run ``fn`` with BLAS on one thread (``single_threaded_blas``): the oracle's and the rounding
    model's entry points, whose serial parts are small products that multithreaded BLAS slows down
    when other processes share the cores (8 ms products took 30-120 ms at a load of 8 on 2 cores)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> R:
        with single_threaded_blas():
            return fn(*args, **kwargs)

    return wrapper


def in_parallel(
    fn: Callable[[T], R], items: Iterable[T], *, flops: float = np.inf, width: int | None = None
) -> Iterator[R]:
    """``fn(item)`` for every item, on one thread per core; yields the results as they complete.

    Serial (in order) with one core, one item, under ``MIN_PARALLEL_FLOPS`` of work (``flops``, the
    caller's estimate), for pieces working on rows narrower than ``MIN_PARALLEL_WIDTH`` (``width``),
    without ``threadpoolctl``, or inside another ``in_parallel`` piece. An exception in a piece is
    raised here once the running pieces finish.
    """
    items = list(items)
    count = min(workers(), len(items))
    narrow = width is not None and width < MIN_PARALLEL_WIDTH
    serial = count <= 1 or flops < MIN_PARALLEL_FLOPS or narrow or getattr(_inside, "active", False)
    if serial or threadpools() is None:
        yield from map(fn, items)
        return

    def piece(item: T) -> R:
        _inside.active = True
        try:
            return fn(item)
        finally:
            _inside.active = False

    with single_threaded_blas(), ThreadPoolExecutor(count, thread_name_prefix="crosscheck") as pool:
        futures = [pool.submit(piece, item) for item in items]
        try:
            for future in as_completed(futures):
                yield future.result()
        finally:
            for future in futures:
                future.cancel()


#: Below this many flops ``beside`` runs its work in the caller's thread: smaller work is a series of
#: NumPy calls so short that the two threads' handing the GIL to each other costs more than the second
#: core saves. Measured on 2 cores, the gradient oracle (N = 8) with its rounding model (``6 * 64 * N *
#: d**2 * L`` flops) beside: d = 16, 17 ms and 12 ms without; d = 40, 43 and 42 ms; d = 48, 59 and 60
#: ms; d = 64, 104 and 111 ms.
MIN_BESIDE_FLOPS = 5e7


@contextlib.contextmanager
def beside(fn: Callable[[], R], *, width: int, flops: float) -> Iterator[Callable[[], R]]:
    """A context that starts ``fn()`` on a thread of its own, for a second core to run while the caller
    works on rows narrower than ``MIN_PARALLEL_WIDTH`` (work that runs serially: see ``in_parallel``).
    It gives a function that waits for ``fn`` and returns its result (or raises its exception); however
    the block is left, ``fn`` has ended by then (its BLAS limit too, which must not outlive the
    caller's).

    ``fn`` runs when that function is called instead, in the caller's thread, with one core, without
    ``threadpoolctl`` (BLAS's threads would compete), for wider rows (the caller's own pieces then use
    every core), under ``MIN_BESIDE_FLOPS`` (``flops``: the caller's estimate of ``fn``'s), or inside an
    ``in_parallel`` piece. Inside ``fn`` pieces run serially (one level of threads).
    """
    alone = workers() <= 1 or width >= MIN_PARALLEL_WIDTH or flops < MIN_BESIDE_FLOPS
    if alone or getattr(_inside, "active", False) or threadpools() is None:
        yield fn
        return
    outcome: dict[str, Any] = {}

    def run() -> None:
        _inside.active = True
        try:
            outcome["value"] = fn()
        except BaseException as error:  # handed to the caller at the wait
            outcome["error"] = error

    thread = threading.Thread(target=run, name="crosscheck-beside", daemon=True)
    thread.start()

    def wait() -> R:
        thread.join()
        if "error" in outcome:
            raise outcome["error"]
        return outcome["value"]

    try:
        yield wait
    finally:
        thread.join()
