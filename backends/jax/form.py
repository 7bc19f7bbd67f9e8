"""The JAX adapter's points along a line formed on the host: ``point + c * signs`` into kept buffers, on
every core this process may use (``workers``: fewer where ``OMP_NUM_THREADS`` asks for fewer).

The sum is memory-bound: 17 bytes read and 8 written an entry, 124 million entries a point on GPT-2
small, 86 points a side for the oracle's default reference. Two threads, each a contiguous half of the
entries, form a point in about 60% of one thread's time (``docs/measurements/real-size.md``, "the default
reference's evaluations on every core"). NumPy gives the GIL back inside its loops, so the threads run at
once. Each entry is computed as one thread would: ``signs * c`` (exact for signs of -1, 0 and 1), then
the sum, rounded once.
"""

from __future__ import annotations

import concurrent.futures
import threading

import numpy as np

from crosscheck._workloads.threadpools import workers

#: Entries a thread computes at a time (256 KiB of float64: the product stays in cache for the sum).
BLOCK = 1 << 15
#: Entries from which a point is formed on several threads (below, the threads' start costs more).
THREADED = 1 << 22

#: The threads' pool and its size, made at the first point formed on threads, kept for the process.
_pool: tuple[int, concurrent.futures.ThreadPoolExecutor] | None = None
_lock = threading.Lock()

#: One tensor's work: its point, its signs, the buffer it is formed in (all C-contiguous, flat), and c.
Piece = tuple[np.ndarray, np.ndarray, np.ndarray, np.float64]


def form(pieces: list[Piece]) -> None:
    """Write ``point + c * signs`` into each piece's buffer, the entries shared among ``workers()``
    threads (the cores this process may use, or ``OMP_NUM_THREADS``) where there are ``THREADED`` of
    them or more."""
    flat = [(p.reshape(-1), s.reshape(-1), b.reshape(-1), c) for p, s, b, c in pieces]
    total = sum(b.size for _, _, b, _ in flat)
    threads = min(workers(), max(1, total // (THREADED // 2)))
    if threads == 1:
        _fill(flat, 0, total)
        return
    bounds = [total * i // threads for i in range(threads + 1)]
    list(_executor(threads).map(_fill, [flat] * threads, bounds[:-1], bounds[1:]))


def _executor(threads: int) -> concurrent.futures.ThreadPoolExecutor:
    global _pool
    with _lock:
        if _pool is None or _pool[0] < threads:
            made = concurrent.futures.ThreadPoolExecutor(threads, thread_name_prefix="crosscheck-form")
            _pool = (threads, made)
        return _pool[1]


def _fill(flat: list[Piece], lo: int, hi: int) -> None:
    """The entries ``lo`` to ``hi`` of the pieces laid end to end."""
    start = 0
    for point, signs, buffer, c in flat:
        end = start + buffer.size
        a, b = max(lo, start) - start, min(hi, end) - start
        for i in range(a, b, BLOCK):
            j = min(i + BLOCK, b)
            out = buffer[i:j]
            np.multiply(signs[i:j], c, out=out)
            np.add(point[i:j], out, out=out)
        start = end
