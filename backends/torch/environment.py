"""PyTorch's entry in the environment record (only once PyTorch is imported: recording never imports
it)."""

from __future__ import annotations

from typing import Any

import numpy as np


def record() -> dict[str, Any]:
    """Version, CUDA and TF32 settings, threads, determinism, and whether float32 subnormals flush."""
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


def side() -> dict[str, str]:
    """Where the PyTorch side runs and at what precision (its adapters' ``info()``): its adapters
    compute on the host CPU; ``float32_matmul_precision`` as in effect."""
    import torch

    return {
        "device": "cpu",
        "platform": "cpu",
        "device_kind": "cpu",
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
    }


def line(t: dict[str, Any]) -> str:
    """The precision-relevant part of ``record()``'s entry, for the report's environment line."""
    return (
        f"torch {t.get('version')}, float32 matmul precision {t.get('float32_matmul_precision')}, "
        f"cuda tf32 {t.get('cuda_matmul_allow_tf32')}, {t.get('threads')} threads, deterministic "
        f"{t.get('deterministic_algorithms')}, subnormals flushed {t.get('subnormals_flushed')}"
    )
