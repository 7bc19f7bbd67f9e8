"""PyTorch: a backend's ``grad`` watched while it runs, with no help from the backend.

Public APIs only: a ``torch.overrides.TorchFunctionMode`` counts every torch function called, and
whether autograd's engine is running a node at the time (backward: every node of the graphs the
watched calls build or hand to ``backward``/``autograd.grad`` is hooked with ``Node.register_prehook``
and ``register_hook``, which also keep the mode on while the node runs, e.g. a checkpoint recomputing
its layers);
``torch.autograd.graph.saved_tensors_hooks`` records every tensor autograd saves during forward, and
who asked (the weights: a leaf that requires grad, or a view sharing its ``untyped_storage()``).
"""

from __future__ import annotations

import inspect
import os
from collections import Counter
from collections.abc import Callable
from types import FrameType
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from crosscheck._evidence.inspect_records import Residual, Structure

if TYPE_CHECKING:
    import torch

_T = TypeVar("_T")


def inspect_backend(
    backend: Any, weights: np.ndarray, x: np.ndarray, result: Structure, *, check_loss: bool
) -> None:
    """What ``crosscheck inspect`` does with a PyTorch backend: watch one run of ``grad``
    (``check_loss``: no separate loss to check, the run watched is ``grad`` itself)."""
    inspect_torch_backend(backend, weights, x, result)


def inspect_torch_backend(backend: Any, weights: np.ndarray, x: np.ndarray, result: Structure) -> None:
    """Fill ``result``'s residuals, findings and evidence by watching one run of ``backend.grad``."""
    ops, saved, nodes_run = watch_torch(backend, weights, x)
    layers = result.layers
    forward_relu = sum(n for (op, backward), n in ops.items() if _is_relu(op) and not backward)
    recomputed = sum(n for (op, backward), n in ops.items() if _is_relu(op) and backward)
    result.residuals = saved
    ckpt_inputs = [r for r in saved if r.origin == "checkpoint input" and r.role == "activation"]
    other = [r for r in saved if r.origin != "checkpoint input" and r.role == "activation"]
    if recomputed == 0:
        checkpoint = None
    elif recomputed == layers and len(ckpt_inputs) == layers:
        checkpoint = "layer"
    elif 0 < len(ckpt_inputs) < layers:
        checkpoint = "segment"
    else:
        checkpoint = "other"
    result.found = {
        "checkpoint": checkpoint,
        "forward_layers": forward_relu,
        "recomputed_layers": recomputed,
        "checkpoint_inputs": len(ckpt_inputs),
        "saved_outside_checkpoints": len(other),
        "why_not": _why_not(len(other), nodes_run) if checkpoint is None else "",
    }
    result.evidence.append(
        f"forward ran {forward_relu} layer(s); during backward {recomputed} layer forward(s) ran again "
        "(counted as ReLUs executed by autograd's engine)"
    )
    result.evidence.append(
        f"autograd saved {len(ckpt_inputs)} activation(s) as checkpoint inputs and {len(other)} "
        f"elsewhere ({', '.join(sorted({r.origin for r in other})) or 'none'})"
    )


def _why_not(saved_elsewhere: int, nodes_run: int) -> str:
    if not nodes_run:  # nothing was seen running backward: say so, never "plain" on no evidence
        return (
            "autograd's engine ran no node the watch could hook: no backward through `backward()` "
            "or `torch.autograd.grad` was seen (one run otherwise, e.g. by torch.func, is not watched)"
        )
    return (
        "no layer's forward ran again during backward (0 ReLUs recomputed), and autograd "
        f"saved {saved_elsewhere} activations outside any checkpoint"
    )


def watch_torch(backend: Any, weights: np.ndarray, x: np.ndarray) -> tuple[Counter, list[Residual], int]:
    """Run ``backend.grad`` once, recording every torch function called (and whether it ran in
    backward), every tensor autograd saved during forward (deduplicated: a tensor saved twice counts
    once) and how many autograd nodes ran. Ops are named by ``torch.overrides.resolve_name``, e.g.
    ``torch.relu``."""
    import torch

    watcher = _Watcher()
    with torch.autograd.graph.saved_tensors_hooks(watcher.pack, lambda t: t), watcher.mode:
        watcher.active = True
        try:
            backend.grad(weights, x)
        finally:
            watcher.release()
    return watcher.ops, list(watcher.saved.values()), watcher.nodes_run


def _is_relu(op: str) -> bool:
    """``torch.relu``, ``torch.nn.functional.relu``, ``torch.Tensor.relu_``: a layer's ReLU."""
    return op.rsplit(".", 1)[-1].startswith("relu")


class _Watcher:
    """The mode, the node hooks and the pack hook of one watched run of ``grad``."""

    def __init__(self) -> None:
        from torch.overrides import TorchFunctionMode

        watcher = self
        self.ops: Counter = Counter()
        self.saved: dict[tuple, Residual] = {}
        self.nodes_run = 0
        self.in_node = 0  # > 0 while autograd's engine runs a (hooked) node: backward
        self.active = False  # the mode is on (it is off while its handler runs a function)
        self.pushed: list[bool] = []  # per node running: did its pre-hook turn the mode on
        self.nodes: dict[int, Any] = {}  # every node hooked, kept alive so that no id is reused
        self.handles: list[Any] = []
        self.leaves: dict[int, Any] = {}  # storage address -> a leaf that requires grad (the weights)

        class Mode(TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):
                return watcher.call(func, args, kwargs or {})

        self.mode = Mode()

    def call(self, func: Callable[..., _T], args: tuple, kwargs: dict) -> _T:
        from torch.overrides import resolve_name

        self.ops[(resolve_name(func) or getattr(func, "__name__", str(func)), self.in_node > 0)] += 1
        tensors = list(_tensors((*args, *kwargs.values())))
        for tensor in tensors:
            if tensor.is_leaf and tensor.requires_grad:
                self.leaves.setdefault(tensor.untyped_storage().data_ptr(), tensor)
        # Every graph an op extends or is handed (`backward`, `autograd.grad`): hook each of its nodes,
        # so that every node autograd's engine runs later is seen running.
        for tensor in tensors:
            self.hook(tensor.grad_fn)
        active, self.active = self.active, False
        try:
            return func(*args, **kwargs)
        finally:
            self.active = active

    def hook(self, root: Any) -> None:
        """Hook every node reachable from ``root``: a pre-hook enters the mode (the handler of
        ``backward`` left it), a hook leaves it; between them, whatever runs runs in backward."""
        todo = [root]
        while todo:
            node = todo.pop()
            if node is None or id(node) in self.nodes:
                continue
            self.nodes[id(node)] = node
            self.handles += [node.register_prehook(self.enter), node.register_hook(self.leave)]
            todo.extend(next_node for next_node, _ in node.next_functions)

    def enter(self, grad_outputs: Any) -> None:
        self.nodes_run += 1
        self.in_node += 1
        self.pushed.append(not self.active)
        if not self.active:
            self.mode.__enter__()
            self.active = True

    def leave(self, grad_inputs: Any, grad_outputs: Any) -> None:
        if self.pushed.pop():
            self.mode.__exit__(None, None, None)
            self.active = False
        self.in_node -= 1

    def pack(self, tensor: torch.Tensor) -> torch.Tensor:
        if not self.in_node:  # kept from forward to backward
            key = (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape))
            self.saved.setdefault(key, _torch_residual(tensor, self.is_weights(tensor)))
        return tensor

    def is_weights(self, tensor: Any) -> bool:
        """A leaf that requires grad, or a view of one (same storage: ``w[k]``, ``w.T``)."""
        address = tensor.untyped_storage().data_ptr()
        return (tensor.is_leaf and tensor.requires_grad) or (address != 0 and address in self.leaves)

    def release(self) -> None:
        """Remove every hook. A node that raised never ran its hook that leaves the mode: autograd's
        engine, which restores the thread's state (its mode stack with it) as the node ends, did."""
        for handle in self.handles:
            handle.remove()
        self.pushed.clear()
        self.in_node = 0
        self.nodes.clear()
        self.leaves.clear()


def _tensors(values: Any):
    import torch

    for value in values:
        if isinstance(value, torch.Tensor):
            yield value
        elif isinstance(value, (list, tuple)):
            yield from _tensors(value)


def _torch_residual(tensor: Any, is_weights: bool) -> Residual:
    return Residual(
        tuple(int(n) for n in tensor.shape),
        str(tensor.dtype).removeprefix("torch."),
        tensor.numel() * tensor.element_size(),
        _torch_origin(),
        "weights" if is_weights else "activation",
    )


def _torch_origin() -> str:
    """Who asked autograd to save: a checkpoint's inputs, or an operation in the user's code."""
    import torch

    frame: FrameType | None = inspect.currentframe()
    # PyTorch's own folder, not any path with a `torch` folder in it (this adapter's is one).
    torch_dir = os.path.dirname(torch.__file__) + os.sep
    while frame is not None:
        filename = frame.f_code.co_filename
        if filename.endswith(os.path.join("utils", "checkpoint.py")) and torch_dir in filename:
            return "checkpoint input"
        # The hooks that call this live in this module: skip its frames to reach the backend's code.
        if torch_dir not in filename and filename != __file__:
            return f"saved by autograd in {frame.f_code.co_name} ({os.path.basename(filename)})"
        frame = frame.f_back
    return "saved by autograd"
