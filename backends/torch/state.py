"""PyTorch's settings a backend may change and the next backend would inherit: read before every
guarded call and restored after it (``crosscheck._engine.call``), while PyTorch is imported; and the run's
placement of the PyTorch side (``placed``), in effect inside each call."""

from __future__ import annotations

import contextlib
import dataclasses
import sys
from collections.abc import Iterator
from typing import Any

from crosscheck._backends.devices import placing
from crosscheck._backends.placement import Placement

#: The settings as they are before anything changed them (a backend may import PyTorch first).
DEFAULTS: dict[str, Any] = {
    "torch default dtype": "float32",
    "torch float32 matmul precision": "highest",
    "torch grad mode": True,
}


def read() -> dict[str, Any]:
    """The settings now (none while PyTorch is only partly imported)."""
    torch = sys.modules.get("torch")
    if torch is None or not hasattr(torch, "get_default_dtype"):
        return {}
    return {
        "torch default dtype": str(torch.get_default_dtype()).removeprefix("torch."),
        "torch float32 matmul precision": torch.get_float32_matmul_precision(),
        "torch grad mode": torch.is_grad_enabled(),
    }


def write(key: str, value: Any) -> None:
    """Set the setting ``key`` (one of ``DEFAULTS``) to ``value``."""
    torch = sys.modules["torch"]
    if key == "torch default dtype":
        torch.set_default_dtype(getattr(torch, value))
    elif key == "torch float32 matmul precision":
        torch.set_float32_matmul_precision(value)
    elif key == "torch grad mode":
        torch.set_grad_enabled(value)


def unavailable(placement: Placement) -> str:
    """Why ``placement`` cannot run in this process, in one line (``""``: it can): a CUDA device asked for
    where PyTorch has none. Imports PyTorch only for such a device."""
    if placement.value("device") != "cuda":
        return ""
    try:
        import torch
    except ImportError:
        return "`torch_device` cuda: PyTorch is not installed"
    if torch.cuda.is_available():
        return ""
    return (
        f"`torch_device` cuda: PyTorch has no CUDA device in this process (torch {torch.__version__}, "
        "torch.cuda.is_available() is False); leave it out, or give cpu"
    )


def at_home(placement: Placement, home: str) -> Placement:
    """``placement`` with the device the side's own code lives on (``home``: a port's module on
    ``cuda:0``) where the run chose none: what the side shares and must fit, before the check starts, is
    that card's, as for ``--torch-device cuda``; a device chosen by name is kept."""
    if placement.value("device") != "default" or not home.startswith("cuda"):
        return placement
    return dataclasses.replace(placement, values={**placement.values, "device": "cuda"})


def device_memory(placement: Placement) -> tuple[str, int] | None:
    """The card the PyTorch side is placed on by name and the bytes free on it now
    (``torch.cuda.mem_get_info``): what a case's estimate must fit; None off a card."""
    if placement.value("device") != "cuda" or unavailable(placement):
        return None
    import torch

    free, _ = torch.cuda.mem_get_info()
    return f"cuda:0 ({torch.cuda.get_device_name(0)})", int(free)


@contextlib.contextmanager
def placed(placement: Placement) -> Iterator[None]:
    """The run's placement of the PyTorch side (``Execution.torch_device``, ``torch_matmul_tf32``,
    ``torch_cudnn_tf32``, ``torch_deterministic``) in effect for one call, in the calling thread: its
    device for the side's tensors (``devices.placing``: a port's side moves its tensors there), PyTorch's
    TF32 switches and its deterministic mode set, and each put back as it was when the call returns (so
    the guarded call, which reads the settings outside this context, never notes them as the backend's
    change). ``"default"`` leaves PyTorch as it is; without PyTorch there is nothing to set.

    Raises:
        RuntimeError: a device this process lacks (``unavailable``), in one line.
    """
    # the device is the side's own code's to read; the switches are set where PyTorch is imported (a
    # PyTorch backend is loaded before its calls): a run without PyTorch never imports it for them
    switches = [n for n in ("matmul_tf32", "cudnn_tf32", "deterministic") if placement.value(n) != "default"]
    torch = sys.modules.get("torch") if switches else None
    with contextlib.ExitStack() as stack:
        device = placement.value("device")
        if device != "default":
            problem = unavailable(placement)
            if problem:
                raise RuntimeError(problem)
            stack.enter_context(placing("torch", device))
        if torch is not None:
            stack.enter_context(_switches(torch, placement))
        yield


@contextlib.contextmanager
def _switches(torch: Any, placement: Placement) -> Iterator[None]:
    """PyTorch's TF32 flags and deterministic mode as ``placement`` asks, restored after."""
    matmul, cudnn = torch.backends.cuda.matmul, torch.backends.cudnn
    before = (matmul.allow_tf32, cudnn.allow_tf32, torch.are_deterministic_algorithms_enabled())
    chosen = {"on": True, "off": False}
    try:
        if placement.value("matmul_tf32") in chosen:
            matmul.allow_tf32 = chosen[placement.value("matmul_tf32")]
        if placement.value("cudnn_tf32") in chosen:
            cudnn.allow_tf32 = chosen[placement.value("cudnn_tf32")]
        if placement.value("deterministic") == "on":
            torch.use_deterministic_algorithms(True)
        yield
    finally:
        matmul.allow_tf32, cudnn.allow_tf32 = before[0], before[1]
        torch.use_deterministic_algorithms(before[2])
