"""PyTorch's entry in the environment record (only once PyTorch is imported: recording never imports
it)."""

from __future__ import annotations

from typing import Any

import numpy as np

from crosscheck._backends.devices import placed_device
from crosscheck._compare.device import Arithmetic


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


def side(*, placed: bool = True, home: str | None = None) -> dict[str, str]:
    """Where the PyTorch side runs now and at what precision (its adapters' ``info()``, read where its
    calls run: inside the run's placement, ``state.placed``): the device it was placed on (the host CPU
    where none was chosen), its ``platform`` (``cpu``, ``cuda``) and kind (the card's name), the
    ``float32_matmul_precision`` in effect, and on CUDA its TF32 switches for products and for cuDNN
    convolutions as in effect. ``placed`` False: an adapter that computes on the host CPU whatever the
    placement (the stack's); ``home``: where its calls compute where none was placed (a port's module on
    ``cuda``)."""
    import torch

    device = torch.device((placed_device("torch") if placed else None) or home or "cpu")
    found = {
        "device": str(device),
        "platform": device.type,
        "device_kind": torch.cuda.get_device_name(device) if device.type == "cuda" else device.type,
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
    }
    if device.type == "cuda":
        found["matmul_tf32"] = _switch(torch.backends.cuda.matmul.allow_tf32)
        found["cudnn_tf32"] = _switch(torch.backends.cudnn.allow_tf32)
    return found


def _switch(on: bool) -> str:
    return "on" if on else "off"


def arithmetic(*, home: str | None = None) -> Arithmetic:
    """Where PyTorch computes now (``side``: inside the run's placement), as the judge models its
    rounding: the platform, the precision level of its float32 products (``highest`` unless TF32 is on
    for them: ``default``) and of its convolutions (``conv``), and the device's kind."""
    found = side(home=home)
    products = "default" if found.get("matmul_tf32") == "on" else "highest"
    return Arithmetic(
        found["platform"], products, found["device_kind"], "torch", conv=found.get("cudnn_tf32", "off")
    )


def line(t: dict[str, Any]) -> str:
    """The precision-relevant part of ``record()``'s entry, for the report's environment line."""
    return (
        f"torch {t.get('version')}, float32 matmul precision {t.get('float32_matmul_precision')}, "
        f"cuda tf32 {t.get('cuda_matmul_allow_tf32')}, {t.get('threads')} threads, deterministic "
        f"{t.get('deterministic_algorithms')}, subnormals flushed {t.get('subnormals_flushed')}"
    )
