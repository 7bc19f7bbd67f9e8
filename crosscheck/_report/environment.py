"""What commonly explains a numeric disagreement: versions, devices, precision and threading settings.

Frameworks are inspected only when already imported (by a backend that ran): recording the environment
never imports JAX or PyTorch. Each framework's entry is its folder's (``backends/<name>/environment.py``).
"""

from __future__ import annotations

import os
import platform
import sys
from collections.abc import Mapping
from typing import Any

import numpy as np

from crosscheck._backends import DECLARED, Framework

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
    for framework in DECLARED:
        if framework.modules[0] in sys.modules:
            record[framework.name] = _framework_record(framework)
    return record


def framework_lines(env: Mapping[str, Any]) -> list[str]:
    """The precision-relevant part of each framework's entry in ``env``, one line each (its folder's
    ``environment.line``), for the report's environment line."""
    return [f.module("environment").line(env[f.name]) for f in DECLARED if f.name in env]


def _framework_record(framework: Framework) -> dict[str, Any]:
    try:
        return framework.module("environment").record()
    except Exception as exc:  # a record must never fail a run
        return {"error": f"{type(exc).__name__}: {exc}"}


def _numpy_flushes_subnormals() -> bool:
    smallest_normal = np.float32(np.finfo(np.float32).tiny)
    return bool(smallest_normal / np.float32(2) == 0)
