"""The PyTorch side of a train: ``steps`` optimizer steps on the port's loss (imported only when used).

The parameters are fresh leaf tensors made from the case's arrays; the module is called through the
port (``torch.func.functional_call``), so the user's module is never changed. The optimizer is built
by the user's factory from ``(PyTorch name, tensor)`` pairs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch

from crosscheck._workloads.port.declare.build import Prepared, torch_implementation
from crosscheck._workloads.port.judge.running import statistics
from crosscheck._workloads.train import running
from crosscheck._workloads.train.state import key
from crosscheck._workloads.train.zeros import NO_GRADIENT


def trajectory(
    prepared: Prepared,
    factory: Callable[..., Any],
    hyper: Mapping[str, Any],
    params: dict[str, np.ndarray],
    inputs: dict[str, np.ndarray],
    steps: int,
    *,
    zero: tuple[str, ...] = (),
) -> dict[str, np.ndarray]:
    """Every parameter after each step, stacked: ``name -> (steps + 1, *shape)`` (row 0: the start);
    the gradients of ``zero`` set to exact zeros before each step (one left None stays None, as
    ``torch.optim`` sees it, and is reported: ``"name (no gradient)"``)."""
    loss = torch_implementation(prepared)
    leaves = {k: torch.tensor(np.array(v), requires_grad=True) for k, v in params.items()}
    tensors = {k: torch.as_tensor(np.array(v)) for k, v in inputs.items()}
    optimizer = factory(list(leaves.items()), **hyper)
    for method in ("zero_grad", "step"):
        if not callable(getattr(optimizer, method, None)):
            raise TypeError(
                f"`torch_optimizer` returned {type(optimizer).__name__}, which has no `{method}()`; "
                "expected a torch.optim optimizer (or anything with zero_grad() and step())"
            )
    rows, start = [_snapshot(leaves)], _state(optimizer, leaves)
    names = statistics(prepared)  # carried from step to step, as the module's own buffers are
    carried = [{k: np.array(inputs[k]) for k in names}]
    none: set[str] = set()
    for step in range(steps):
        optimizer.zero_grad()
        value = loss(leaves, tensors)
        value.backward()
        if names:  # the step's forward updates them, from the parameters before the step
            tensors.update(_carried(prepared, leaves, tensors, inputs))
            carried.append({k: tensors[k].numpy().copy() for k in names})
        none.update(k for k, v in leaves.items() if v.grad is None)
        for k in zero:
            if leaves[k].grad is not None:
                leaves[k].grad.zero_()
        optimizer.step()
        rows.append(_snapshot(leaves))
        if step == 0:  # a fresh optimizer makes its state here: read as zeros before it
            start = {k: start.get(k, np.zeros_like(v)) for k, v in _state(optimizer, leaves).items()}
    dtype = next(iter(params.values())).dtype
    start.update({key(k, NO_GRADIENT): np.ones(()) for k in none})
    return {
        **{k: np.stack([row[k] for row in rows]) for k in leaves},
        **{running.key(k): np.stack([row[k] for row in carried]) for k in names},
        **_rows(start, dtype),
    }


def _carried(
    prepared: Prepared, leaves: dict[str, torch.Tensor], tensors: dict[str, torch.Tensor], inputs: dict
) -> dict[str, torch.Tensor]:
    """The module's buffers after one training-mode forward from ``leaves`` and ``tensors``' buffers
    (``torch_training.updated``): the running statistics and their ``num_batches_tracked``."""
    from crosscheck._workloads.port.sides import torch_training

    state = {k: v.detach().numpy() for k, v in leaves.items()}
    state.update({k: v.numpy() for k, v in tensors.items() if k in prepared.values and k not in leaves})
    after = torch_training.updated(prepared.torch_side, state, prepared.user_inputs(inputs))
    return {k: torch.as_tensor(v) for k, v in after.items() if k not in leaves}


def _snapshot(leaves: dict[str, torch.Tensor]) -> dict[str, np.ndarray]:
    return {k: v.detach().cpu().numpy().copy() for k, v in leaves.items()}


def _state(optimizer: Any, leaves: dict[str, torch.Tensor]) -> dict[str, np.ndarray]:
    """The optimizer's ``state`` (``torch.optim``'s: tensor -> {kind: value}) by ``"name (kind)"``;
    empty when it has none (a wrapper exposes its optimizer's ``state``)."""
    state = getattr(optimizer, "state", None)
    if not isinstance(state, Mapping):
        return {}
    out = {}
    for name, leaf in leaves.items():
        for kind, v in (state.get(leaf) or {}).items():
            if isinstance(v, (torch.Tensor, int, float)) and not isinstance(v, bool):
                array = v.detach().cpu().numpy() if isinstance(v, torch.Tensor) else np.asarray(v)
                out[key(name, str(kind))] = array.copy()
    return out


def _rows(state: dict[str, np.ndarray], dtype: Any) -> dict[str, np.ndarray]:
    """The start state as one-row trajectories in the run's dtype."""
    return {k: np.asarray(v, dtype)[None] for k, v in state.items()}


class Stepper:
    """A user's step function as an optimizer: ``fn(params, grads, state, **hyper)`` updates ``params``
    in place under ``torch.no_grad()``; ``state`` (a dict by parameter name) is shown as ``state``."""

    def __init__(self, fn: Callable[..., Any], named: list, hyper: Mapping[str, Any]) -> None:
        self.fn, self.params, self.hyper = fn, dict(named), dict(hyper)
        self.kept: dict[str, Any] = {}

    @property
    def state(self) -> dict[torch.Tensor, Any]:
        return {
            self.params[k]: v for k, v in self.kept.items() if k in self.params and isinstance(v, Mapping)
        }

    def zero_grad(self) -> None:
        for p in self.params.values():
            p.grad = None

    def step(self) -> None:
        grads = {k: p.grad if p.grad is not None else torch.zeros_like(p) for k, p in self.params.items()}
        with torch.no_grad():
            out = self.fn(self.params, grads, self.kept, **self.hyper)
        if out is not None:
            raise TypeError(
                f"`torch_step` returned {type(out).__name__}; expected None (it updates `params` in place)"
            )


def stepper(fn: Callable[..., Any], named: list, **hyper: Any) -> Stepper:
    """The optimizer of a ``torch_step`` (``Train(torch_step=...)``)."""
    return Stepper(fn, named, hyper)
