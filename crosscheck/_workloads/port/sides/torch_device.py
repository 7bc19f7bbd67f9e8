"""Where the PyTorch side of a port computes, and its tensors put there for each call: the device the
run placed it on (``--torch-device``, ``Execution.torch_device``), else where the user's module lives
(a module on ``cuda`` is checked there). The arrays crosscheck hands are made on the host; each call
moves them (autograd's ``to``: a gradient comes back to the tensor handed), and its results come back
to the host only to be compared. Imported only when a port is used (it imports torch).
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import torch

from crosscheck._backends.devices import placed_device
from crosscheck._compare.device import DEVICE_PERMIT_ULPS
from crosscheck._compare.dtypes import unit_roundoff
from crosscheck._types import FrameworkArray

#: How a side's sums are made in one order every call, to check it bit for bit on a GPU.
DETERMINISTIC = (
    "`--torch-deterministic on` (torch.use_deterministic_algorithms) for the PyTorch side, and "
    "`--jax-deterministic on` (XLA_FLAGS=--xla_gpu_deterministic_ops=true) for JAX's"
)


def device_of(module: torch.nn.Module) -> torch.device:
    """Where the PyTorch side computes: the device the run placed it on (``--torch-device``), else where
    the module lives (its first parameter or buffer's; the host CPU without one)."""
    placed = placed_device("torch")
    if placed is not None:
        return torch.device(placed)
    own = next(itertools.chain(module.parameters(), module.buffers()), None)
    return own.device if own is not None else torch.device("cpu")


class Homed:
    """A port's PyTorch loss (``fn``) that says where its ``module`` computes (``home``), so that its
    adapter's ``where`` names the device a module living on ``cuda`` runs on."""

    def __init__(self, fn: Any, module: torch.nn.Module) -> None:
        self.fn, self.module = fn, module

    def __call__(self, params: dict, inputs: dict) -> FrameworkArray:
        return self.fn(params, inputs)

    def home(self) -> str:
        """The device its calls compute on now (``device_of``)."""
        return str(device_of(self.module))


def on_device(module: torch.nn.Module, state: dict[str, Any], inputs: dict[str, Any]) -> tuple[dict, dict]:
    """``state`` and ``inputs`` on the side's device (``device_of``), with the module's buffers that
    ``state`` lacks (non-persistent ones: a causal mask) there too, so that ``functional_call`` computes
    with no tensor left elsewhere; as they are where every tensor is there already (the host CPU). A
    move is autograd's ``to``: a gradient comes back to the tensor handed."""
    device = device_of(module)
    held = [t for t in _tensors([state, inputs]) if t.device != device]
    if not held and all(b.device == device for _, b in module.named_buffers()):
        return state, inputs
    missing = {k: b for k, b in module.named_buffers() if k not in state}
    moved = ({k: _moved(v, device) for k, v in given.items()} for given in ({**missing, **state}, inputs))
    return next(moved), next(moved)


def _moved(value: object, device: torch.device) -> object:
    """``value`` with each tensor in it on ``device`` (tuples, lists, dicts kept)."""
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, dict):
        return {k: _moved(v, device) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return type(value)(_moved(v, device) for v in value)
    return value


def _tensors(value: Any) -> list[torch.Tensor]:
    """The tensors in ``value`` (tuples, lists, dicts), in order."""
    if isinstance(value, torch.Tensor):
        return [value]
    items = value.values() if isinstance(value, dict) else value if isinstance(value, (tuple, list)) else ()
    return [t for item in items for t in _tensors(item)]


def reorders(module: torch.nn.Module) -> bool:
    """Whether the side's sums may be made in another order from call to call: on a GPU (a scatter-add's
    atomics: an embedding's gradient, ``index_add_``) unless PyTorch's deterministic algorithms are on."""
    return device_of(module).type == "cuda" and not torch.are_deterministic_algorithms_enabled()


def within_rounding(first: float, second: float, dtype: str) -> bool:
    """Whether two results of the same call differ by no more than the side's own rounding: a sum made in
    another order (``DEVICE_PERMIT_ULPS`` of ``dtype``'s unit of the larger), never a value that moved."""
    scale = max(abs(first), abs(second))
    return abs(first - second) <= DEVICE_PERMIT_ULPS * unit_roundoff(dtype) * scale


def reordered(module: torch.nn.Module, first: np.ndarray, second: np.ndarray, dtype: str) -> bool:
    """Whether two losses of the same call that differ are the side's nondeterminism, not its state: it
    ``reorders`` its sums, and they differ ``within_rounding``."""
    if not (reorders(module) and first.size and second.size):
        return False
    return within_rounding(float(first.ravel()[0]), float(second.ravel()[0]), dtype)


def offer(module: torch.nn.Module) -> str:
    """The end of a refusal on a GPU: how to make its sums in one order, to check bit for bit ("" off a
    GPU, or with the deterministic algorithms on already)."""
    if not reorders(module):
        return ""
    return (
        f"; on a GPU a sum may be made in another order each call: to check bit for bit, use {DETERMINISTIC}"
    )
