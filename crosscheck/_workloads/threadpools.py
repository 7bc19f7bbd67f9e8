"""This process's thread pools (OpenMP, BLAS), as ``threadpoolctl`` controls them: one controller,
shared by both oracles, the stack's (``stack.oracle.parallel``: its pieces on every core, BLAS held to one
thread) and the model's (``model.oracle.one_thread``: each evaluation on one thread); and how many threads
work shared among cores may use (``workers``). Below both, so that neither oracle imports the other."""

from __future__ import annotations

import functools
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from threadpoolctl import ThreadpoolController


def workers() -> int:
    """The cores this process may run on, or fewer where ``OMP_NUM_THREADS`` asks for fewer threads
    (as parallel processes, a sweep's workers say, usually do)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        cores = os.cpu_count() or 1
    asked = os.environ.get("OMP_NUM_THREADS", "")
    if asked.strip().isdigit() and int(asked) > 0:
        cores = min(cores, int(asked))
    return max(1, cores)


@functools.cache
def threadpools() -> ThreadpoolController | None:
    """``threadpoolctl``'s controller of this process's thread pools (one, cached), or None without it."""
    try:
        from threadpoolctl import ThreadpoolController
    except ImportError:
        return None
    return ThreadpoolController()
