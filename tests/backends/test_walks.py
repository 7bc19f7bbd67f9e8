"""The walks of `crosscheck inspect` on public framework APIs only: what they see, and what they refuse.

PyTorch: a ``TorchFunctionMode`` with autograd node hooks tells forward from backward; JAX: the lines
``print_saved_residuals`` prints, checked against the residuals of ``jax.vjp``.
"""

from __future__ import annotations

from typing import ClassVar

import pytest

import crosscheck
from crosscheck._evidence.inspect import inspect_backend

LAYERS, BATCH, DIM = 3, 2, 3
WEIGHTS, X = crosscheck.make_inputs(crosscheck.Case(layers=LAYERS, batch=BATCH, dim=DIM))


class _TorchBackend:
    name = "watched"
    claims: ClassVar[dict] = {"framework": "torch", "checkpoint": "layer"}

    def grad(self, weights, x):
        import torch

        w = torch.tensor(weights, requires_grad=True)
        y = self.forward(w, torch.tensor(x))
        self.backward(torch.sum(y**2), w)
        return w.grad.numpy()

    def backward(self, loss, w):
        loss.backward()


class ReentrantCheckpoint(_TorchBackend):
    """``checkpoint(use_reentrant=True)`` per layer, ``F.relu``: its recomputation runs a nested
    ``torch.autograd.backward`` inside autograd's engine."""

    def forward(self, w, y):
        import torch
        from torch.utils.checkpoint import checkpoint

        def layer(y, wk):
            return torch.nn.functional.relu(y @ wk)

        for k in range(w.shape[0]):
            y = checkpoint(layer, y, w[k], use_reentrant=True)
        return y


class ModuleReluThroughGrad(ReentrantCheckpoint):
    """An ``nn.ReLU`` module, a non-reentrant checkpoint, and ``torch.autograd.grad`` for backward."""

    def forward(self, w, y):
        import torch
        from torch.utils.checkpoint import checkpoint

        relu = torch.nn.ReLU()
        for k in range(w.shape[0]):
            y = checkpoint(lambda y, wk: relu(torch.matmul(y, wk)), y, w[k], use_reentrant=False)
        return y

    def backward(self, loss, w):
        import torch

        (w.grad,) = torch.autograd.grad(loss, w)


@pytest.mark.parametrize("backend", [ReentrantCheckpoint, ModuleReluThroughGrad])
def test_torch_checkpoints_are_seen_however_they_are_written(backend):
    pytest.importorskip("torch")
    result = inspect_backend(backend(), WEIGHTS, X)
    assert result.ok, result.problems
    found = result.found
    assert (found["forward_layers"], found["recomputed_layers"]) == (LAYERS, LAYERS)
    assert found["checkpoint"] == "layer"
    roles = [(r.origin, r.role) for r in result.residuals]
    assert roles.count(("checkpoint input", "weights")) == LAYERS  # w[k]: a view of the weights
    assert roles.count(("checkpoint input", "activation")) == LAYERS


class NoBackwardSeen(_TorchBackend):
    """Claims a checkpoint but computes its gradient by hand: autograd's engine never runs."""

    def grad(self, weights, x):
        import torch

        w, y = torch.tensor(weights), torch.tensor(x)
        for k in range(w.shape[0]):
            y = torch.relu(y @ w[k])
        return torch.zeros_like(w).numpy()  # any gradient: inspect looks at how, not what


def test_a_run_with_no_backward_seen_is_said_and_fails_a_checkpoint_claim():
    pytest.importorskip("torch")
    result = inspect_backend(NoBackwardSeen(), WEIGHTS, X)
    assert not result.ok
    assert any("autograd's engine ran no node the watch could hook" in p for p in result.problems)


class RaisesInBackward(_TorchBackend):
    """A custom autograd function whose backward raises, while the mode is on for its node."""

    def forward(self, w, y):
        import torch

        class Fails(torch.autograd.Function):
            @staticmethod
            def forward(ctx, y):
                return torch.relu(y)

            @staticmethod
            def backward(ctx, grad):
                raise ValueError("planted failure in backward")

        for k in range(w.shape[0]):
            y = Fails.apply(y @ w[k])
        return y


def test_a_backward_that_raises_leaves_no_mode_or_hook_behind(monkeypatch):
    torch = pytest.importorskip("torch")
    from crosscheck.backends.torch import walk

    watchers = []

    class Recorded(walk._Watcher):
        def __init__(self):
            super().__init__()
            watchers.append(self)

    monkeypatch.setattr(walk, "_Watcher", Recorded)
    with pytest.raises(ValueError, match="planted failure"):
        inspect_backend(RaisesInBackward(), WEIGHTS, X)
    (watcher,) = watchers
    calls = sum(watcher.ops.values())
    assert calls > 0 and watcher.nodes_run > 0  # it watched, and a node started
    w = torch.ones(2, 2, requires_grad=True)
    torch.sum(torch.relu(w @ w)).backward()
    assert sum(watcher.ops.values()) == calls  # its mode is off, its hooks are gone
    assert watcher.nodes_run > 0 and not watcher.pushed


def _loss_printing(line):
    def loss(weights, x):
        import jax
        import jax.numpy as jnp

        print(line)  # runs while JAX traces the loss, as print_saved_residuals prints
        return jnp.sum(jax.lax.scan(lambda y, w: (jax.nn.relu(y @ w), None), x, weights)[0] ** 2)

    return loss


def test_jax_residuals_ignore_what_the_loss_prints_while_traced():
    pytest.importorskip("jax")
    from crosscheck.backends.jax.walk import jax_residuals

    quiet = jax_residuals(_loss_printing(""), WEIGHTS, X)
    chatty = jax_residuals(_loss_printing("step 1 of the loss [debug]"), WEIGHTS, X)
    assert chatty == quiet
    assert ((LAYERS, BATCH, DIM), "bool", "activation") in {(r.shape, r.dtype, r.role) for r in quiet}
    assert ((LAYERS, DIM, DIM), "float32", "weights") in {(r.shape, r.dtype, r.role) for r in quiet}


def test_jax_residuals_refuse_lines_that_are_not_the_residuals_jax_keeps():
    pytest.importorskip("jax")
    from crosscheck.backends.jax.walk import jax_residuals

    # A line that reads as a residual but is none: the list printed is then not what jax.vjp keeps.
    loss = _loss_printing("f32[2,3] output of mul from fake.py:1:1 (loss)")
    with pytest.raises(RuntimeError, match=r"not the 5 residuals jax\.vjp keeps"):
        jax_residuals(loss, WEIGHTS, X)
