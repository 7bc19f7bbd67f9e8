"""The PyTorch side's cotangents: the gradient of the loss with respect to each module's output and to
its first input, one backward pass with full backward hooks (``register_full_backward_hook``, removed
after), and the modules whose output is made by a ``torch.autograd.Function`` (a custom op: its backward
is written by hand).

Each record is a ``ModuleCall`` whose ``outputs`` are the gradients reaching the module's outputs and
whose ``inputs`` the gradient leaving its first positional input (through this module's backward alone),
in the order the forward calls finished (reversed: backward order). Imported only by the port's backward
localisation (it imports torch).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from crosscheck._workloads.port.sides.torch_side import ModuleCall, Wrapped, flat, left_out, share

#: The node name of what a full backward hook wraps a module's inputs and outputs in: a
#: ``torch.autograd.Function`` of PyTorch's own, not the model's (``torch.utils.hooks`` tests it by name).
_HOOK_NODE = "BackwardHookFunctionBackward"
#: How many autograd nodes of one module's backward are searched for a custom op (a bound on the walk).
_NODES = 20_000


def cotangents(
    wrapped: Wrapped, loss: Callable[[dict, dict], Any], params: dict[str, Any], inputs: dict[str, Any]
) -> tuple[list[ModuleCall], dict[str, tuple[str, ...]]]:
    """Every submodule call of ``wrapped``'s module, its cotangents (see the module docstring), and by
    call label the custom ops (``torch.autograd.Function`` classes) its output is made by. ``loss``: the
    port's PyTorch loss, ``(params, inputs) -> scalar`` (``build.torch_implementation``), called once
    with tensors over the arrays ``params`` and ``inputs`` (the guarded call's private copies)."""
    finished: list[str] = []
    pending: dict[str, list[str]] = {}
    shapes: dict[str, list[tuple[torch.Size, torch.dtype]]] = {}
    custom: dict[str, tuple[str, ...]] = {}
    got: dict[str, ModuleCall] = {}
    seen: dict[str, int] = {}

    def forward_hook(name: str) -> Callable:
        def hook(mod: torch.nn.Module, args: Any, kwargs: Any, output: Any) -> None:
            seen[name] = seen.get(name, 0) + 1
            label = name if seen[name] == 1 else f"{name}#{seen[name]}"
            finished.append(label)
            pending.setdefault(name, []).append(label)
            shapes[label] = [(t.shape, t.dtype) for t in flat(output)]
            ops = custom_ops(flat(output), flat((args, kwargs)))
            if ops:
                custom[label] = ops

        return hook

    def backward_hook(name: str) -> Callable:
        def hook(mod: torch.nn.Module, grad_input: Any, grad_output: Any) -> None:
            label = pending[name].pop() if pending.get(name) else name  # backward runs the calls last first
            outs = tuple(
                _numpy(g) if g is not None else np.zeros(tuple(shape))
                for g, (shape, _) in zip(grad_output, shapes.get(label, []), strict=False)
            )
            ins = tuple(_numpy(g) for g in grad_input[:1] if g is not None)
            got[label] = ModuleCall(label, type(mod).__name__, ins, outs)

        return hook

    skipped = left_out(wrapped.m)
    named = [(n, m) for n, m in wrapped.m.named_modules() if n and not any(_under(n, s) for s in skipped)]
    handles = [m.register_forward_hook(forward_hook(n), with_kwargs=True) for n, m in named]
    handles += [m.register_full_backward_hook(backward_hook(n)) for n, m in named]
    try:
        leaves = {k: _leaf(v) for k, v in params.items()}
        given = {k: _leaf(v) for k, v in inputs.items()}
        value = loss(leaves, given)
        # the inputs too: a module's hook runs once the gradient leaving its inputs is computed
        wanted = [
            v for v in (*leaves.values(), *given.values()) if isinstance(v, torch.Tensor) and v.requires_grad
        ]
        torch.autograd.grad(value, wanted, allow_unused=True)
    finally:
        for h in handles:
            h.remove()
    return [got[label] for label in finished if label in got], custom


def custom_ops(outputs: list[torch.Tensor], inputs: list[torch.Tensor]) -> tuple[str, ...]:
    """The ``torch.autograd.Function`` classes (their names) in the autograd graph between a module's
    ``outputs`` and its ``inputs``: the custom ops the module runs (PyTorch's own hook nodes left out)."""
    stop = {id(t.grad_fn) for t in inputs if t.grad_fn is not None}
    todo = [t.grad_fn for t in outputs if t.grad_fn is not None]
    visited: set[int] = set()
    found: list[str] = []
    while todo and len(visited) < _NODES:
        node = todo.pop()
        if id(node) in visited or id(node) in stop:
            continue
        visited.add(id(node))
        named = node.name()
        if isinstance(node, torch.autograd.function.BackwardCFunction) and named != _HOOK_NODE:
            found.append(named.removesuffix("Backward"))
        todo.extend(n for n, _ in node.next_functions if n is not None)
    return tuple(dict.fromkeys(found))


def _leaf(value: object) -> object:
    """A floating tensor as a leaf that requires its gradient (over the guarded call's private array
    where it can: ``share``); anything else as it is."""
    if isinstance(value, np.ndarray) and np.issubdtype(value.dtype, np.floating):
        return share(value, requires_grad=True)
    if isinstance(value, np.ndarray):
        return share(value)
    if isinstance(value, torch.Tensor) and value.is_floating_point():
        return value.detach().requires_grad_()
    return value


def _under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def _numpy(t: torch.Tensor) -> np.ndarray:
    t = t.detach().cpu()
    return (t.float() if t.dtype == torch.bfloat16 else t).numpy().astype(np.float64)
