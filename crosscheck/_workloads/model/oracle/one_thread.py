"""The model oracle's many small evaluations, each on one thread: no oversubscription.

Each evaluation of a loss by the oracle is one small forward pass, and there are thousands. PyTorch's
OpenMP pool and a multithreaded BLAS start their threads for each, and when another framework (JAX's
own threads) or another process shares the cores, their spin-waits cost far more than the work:
measured on a 2-core machine at load ~9 (2026-12-02), the tanh MLP's float64 PyTorch loss
(``examples/healthy.py``) took 17.7 ms with PyTorch's 2 threads and 0.22 ms on one; a newcomer's port
took 198 s by default and 39.9 s with ``OMP_NUM_THREADS=1``. So the oracle holds OpenMP and BLAS to one
thread while it evaluates (``threadpoolctl``, as configured again after); without ``threadpoolctl`` it
changes nothing. The oracle's notes say so (``threads_note``).

A model of real size is the other case: each evaluation is a forward pass of seconds' worth of matrix
products, whose threads' start is nothing beside them. Held to one thread, GPT-2 small's float64 forward
took 0.21 s against 0.12 s on 2 threads (this project's 2-core machine, idle, 2026-12-05), 86 times a
side (issue 38). From ``MANY`` parameters the threads are left as configured.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

#: What the oracle's notes say of its threads.
THREADS = "one OpenMP and BLAS thread per evaluation (threadpoolctl): no oversubscription"
#: What they say of a model of ``MANY`` parameters or more.
MANY_THREADS = "OpenMP and BLAS threads as configured: each evaluation is a forward pass of real size"

#: Parameters from which the oracle leaves the threads as configured (2**24: 16.8 million).
MANY = 1 << 24


def threads_note(parameters: int) -> str:
    """What the oracle's notes say of its threads, for a model of ``parameters`` entries."""
    return MANY_THREADS if parameters >= MANY else THREADS


@contextlib.contextmanager
def one_thread(parameters: int = 0) -> Iterator[None]:
    """OpenMP (PyTorch's intra-op pool among them) and BLAS on one thread, as configured again after;
    for a model of ``MANY`` ``parameters`` or more (entries, all tensors together), nothing changes.
    The libraries are looked up at each call, not once: a framework imported since (PyTorch's OpenMP)
    is held too."""
    if parameters >= MANY:
        yield
        return
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        yield
        return
    with threadpool_limits(limits=1):
        yield
