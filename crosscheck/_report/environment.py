"""What commonly explains a numeric disagreement: versions, devices, precision and threading settings.

Frameworks are inspected only when already imported (by a backend that ran): recording the environment
never imports JAX or PyTorch.
"""

from __future__ import annotations

import functools
import os
import platform
import sys
from typing import Any

import numpy as np

_THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "XLA_FLAGS")


def environment() -> dict[str, Any]:
    """The environment record of the JSON report (keys are added over time, never renamed)."""
    record: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "thread_variables": {name: os.environ.get(name) for name in _THREAD_VARIABLES},
        "numpy": {"version": np.__version__, "subnormals_flushed": _numpy_flushes_subnormals()},
    }
    if "jax" in sys.modules:
        record["jax"] = _guarded(_jax)
    if "torch" in sys.modules:
        record["torch"] = _guarded(_torch)
    return record


def _guarded(probe) -> dict[str, Any]:
    try:
        return probe()
    except Exception as exc:  # a record must never fail a run
        return {"error": f"{type(exc).__name__}: {exc}"}


def _numpy_flushes_subnormals() -> bool:
    smallest_normal = np.float32(np.finfo(np.float32).tiny)
    return bool(smallest_normal / np.float32(2) == 0)


def _jax() -> dict[str, Any]:
    import jax

    # device_put and a comparison on the host: jnp.float32(...) and `== 0` on a JAX array compile a
    # program each (~25 ms together here); only the halving itself must run in XLA.
    smallest_normal = jax.device_put(np.float32(np.finfo(np.float32).tiny))
    return {
        "version": jax.__version__,
        "devices": [str(d) for d in jax.devices()],
        "default_matmul_precision": str(jax.config.jax_default_matmul_precision),
        "x64_enabled_globally": bool(jax.config.jax_enable_x64),
        "subnormals_flushed": bool(np.asarray(_jax_halve()(smallest_normal)) == 0),
    }


@functools.cache
def _jax_halve():
    """One jitted ``v / 2`` per process: a fresh lambda would be traced and compiled on every report."""
    import jax

    return jax.jit(lambda v: v / 2)


def _torch() -> dict[str, Any]:
    import torch

    smallest_normal = torch.tensor(np.finfo(np.float32).tiny, dtype=torch.float32)
    return {
        "version": torch.__version__,
        "cuda_available": torch.cuda.is_available(),
        "cuda_matmul_allow_tf32": torch.backends.cuda.matmul.allow_tf32,
        "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32,
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "threads": torch.get_num_threads(),
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
        "subnormals_flushed": bool((smallest_normal / 2).item() == 0),
    }
