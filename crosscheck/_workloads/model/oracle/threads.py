"""The model oracle's many small evaluations, each on one thread: no oversubscription.

Each evaluation of a loss by the oracle is one small forward pass, and there are thousands. PyTorch's
OpenMP pool and a multithreaded BLAS start their threads for each, and when another framework (JAX's
own threads) or another process shares the cores, their spin-waits cost far more than the work:
measured on a 2-core machine at load ~9 (2026-12-02), the tanh MLP's float64 PyTorch loss
(``examples/healthy.py``) took 17.7 ms with PyTorch's 2 threads and 0.22 ms on one; a newcomer's port
took 198 s by default and 39.9 s with ``OMP_NUM_THREADS=1``. So the oracle holds OpenMP and BLAS to one
thread while it evaluates (``threadpoolctl``, as configured again after); without ``threadpoolctl`` it
changes nothing. The oracle's notes say so (``THREADS``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

#: What the oracle's notes say of its threads.
THREADS = "one OpenMP and BLAS thread per evaluation (threadpoolctl): no oversubscription"


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """OpenMP (PyTorch's intra-op pool among them) and BLAS on one thread, as configured again after.
    The libraries are looked up at each call, not once: a framework imported since (PyTorch's OpenMP)
    is held too."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        yield
        return
    with threadpool_limits(limits=1):
        yield
