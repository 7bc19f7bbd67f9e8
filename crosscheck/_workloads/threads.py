"""This process's thread pools (OpenMP, BLAS), as ``threadpoolctl`` controls them: one controller,
shared by both oracles, the stack's (``stack.oracle.threads``: its pieces on every core, BLAS held to one
thread) and the model's (``model.oracle.threads``: each evaluation on one thread). Below both, so that
neither oracle imports the other."""

from __future__ import annotations

import functools
from typing import Any


@functools.cache
def threadpools() -> Any:
    """``threadpoolctl``'s controller of this process's thread pools (one, cached), or None without it."""
    try:
        from threadpoolctl import ThreadpoolController
    except ImportError:
        return None
    return ThreadpoolController()
