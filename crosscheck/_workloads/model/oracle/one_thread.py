"""The model oracle's many small evaluations, each on one thread: no oversubscription.

Each evaluation of a loss by the oracle is one small forward pass, and there are thousands. PyTorch's
OpenMP pool and a multithreaded BLAS start their threads for each, and when another framework (JAX's own
threads) or another process shares the cores, their spin-waits cost far more than the work (an evaluation
dozens of times slower, a port's check several times: ``docs/measurements/speed.md``, "The model oracle's
threads"). So the oracle holds OpenMP and BLAS to one thread while it evaluates (``threadpoolctl``, as
configured again after); without ``threadpoolctl`` it changes nothing. The oracle's notes say so
(``threads_note``).

A model of real size is the other case: each evaluation is a forward pass of seconds' worth of matrix
products, whose threads' start is nothing beside them: held to one thread, GPT-2 small's float64 forward
takes nearly twice as long, 86 times a side (``docs/measurements/real-size.md``, "the default
reference's evaluations on every core"). From ``MANY`` parameters the threads are left as configured.
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
