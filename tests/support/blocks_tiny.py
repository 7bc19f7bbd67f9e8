"""A tiny residual model for the blockwise check's tests: an input layer, three residual tanh blocks
(``blocks.0`` to ``blocks.2``: ``x + fc2(tanh(fc1(ln(x))))``) and a head, in PyTorch, and the block's
Flax linen port. ``make(bug=...)`` plants a bug in one block's port; the attributes below are what a
Dask worker imports by name (``tests.support.blocks_tiny:healthy``)."""

from __future__ import annotations

import functools
import threading

WIDTH, BLOCKS = 4, 3
#: What a hanging block's port waits for (``make(hang_in=...)``): set by the test when it is done, so
#: that the thread left waiting ends.
RELEASE = threading.Event()


def make(
    name="tiny-blocks",
    *,
    bug_in=None,
    bug="scale",
    pattern="blocks.*",
    port_error=None,
    unmapped=False,
    layered=False,
    forgets=(),
    hang_in=None,
    straight_through=False,
):
    """The blockwise check; ``bug_in``: the block whose port has ``bug`` (``scale``: its hidden layer
    scaled by 1.01, in ``fc1``'s output; ``epsilon``: its LayerNorm's epsilon 1e-3); ``port_error``: the
    block whose ``port`` factory raises; ``unmapped``: every port leaves ``fc2.weight`` out of its pytree;
    ``layered``: block ``i`` divides its branch by ``1 + i`` (its layer index, no weight of its own);
    ``forgets``: what builds every block as layer 0 (``"port"``, ``"torch_block"``); ``hang_in``: the
    block whose ``port`` factory never returns (until ``RELEASE`` is set; then it raises);
    ``straight_through``: the model's blocks take tanh's derivative as 1 (the same forward, bit for bit),
    where ``torch_block`` builds them with tanh's own."""
    import crosscheck

    def model():
        import torch

        _not_on_a_worker()
        torch.manual_seed(0)
        return _classes()[1](layered, straight_through).eval()

    def port(index, block_name, module):
        import flax.linen as nn
        import jax.numpy as jnp

        if block_name == port_error:
            raise RuntimeError("the port of this block cannot be built")
        if block_name == hang_in:
            RELEASE.wait()
            raise RuntimeError("released by the test")
        broken = block_name == bug_in

        class FlaxBlock(nn.Module):
            @nn.compact
            def __call__(self, x):
                eps = 1e-3 if broken and bug == "epsilon" else 1e-5
                h = nn.Dense(6, name="fc1")(nn.LayerNorm(epsilon=eps, name="ln")(x))
                if broken and bug == "scale":
                    h = h * 1.01
                branch = nn.Dense(WIDTH, name="fc2")(jnp.tanh(h))
                return x + (branch / (1 + (0 if "port" in forgets else index)) if layered else branch)

        extra = {"overrides": {"fc2.weight": None}} if unmapped else {}
        return dict(jax=FlaxBlock(), **extra)

    def inputs(rng, dtype):
        return {"x": rng.standard_normal((5, 3))}  # float64: the recording casts it to the model's dtype

    def torch_block(index, block_name):  # the block alone (its weights: the recording's)
        return _classes()[0]((0 if "torch_block" in forgets else index) if layered else None)

    return crosscheck.Blocks(
        name=name, torch=model, inputs=inputs, blocks=pattern, port=port, torch_block=torch_block
    )


def _not_on_a_worker():
    """A Dask worker holds one block, never the model: building the model in one is an error."""
    try:
        from distributed import get_worker

        get_worker()
    except (ImportError, ValueError):  # not inside a Dask task
        return
    raise RuntimeError("a Dask worker built the whole model")


@functools.cache
def _classes():
    """The PyTorch block and model classes (defined when first asked for: importing this module imports
    no framework)."""
    import torch

    class StraightTanh(torch.autograd.Function):  # tanh forward, bit for bit; its derivative taken as 1
        @staticmethod
        def forward(ctx, h):
            return torch.tanh(h)

        @staticmethod
        def backward(ctx, grad):
            return grad

    class Block(torch.nn.Module):
        def __init__(self, layer=None, straight=False):
            super().__init__()
            self.layer = layer  # its layer index, when its branch is divided by 1 + layer
            self.tanh = StraightTanh.apply if straight else torch.tanh
            self.ln = torch.nn.LayerNorm(WIDTH)
            self.fc1, self.fc2 = torch.nn.Linear(WIDTH, 6), torch.nn.Linear(6, WIDTH)

        def forward(self, x, scale=None):
            branch = self.fc2(self.tanh(self.fc1(self.ln(x))))
            return x + (branch if self.layer is None else branch / (1 + self.layer))

    class Model(torch.nn.Module):
        def __init__(self, layered=False, straight=False):
            super().__init__()
            self.embed = torch.nn.Linear(3, WIDTH)
            self.blocks = torch.nn.ModuleList(
                [Block(i if layered else None, straight) for i in range(BLOCKS)]
            )
            self.head = torch.nn.Linear(WIDTH, 2)

        def forward(self, x):
            h = self.embed(x)
            for block in self.blocks:
                h = block(h, scale=None)
            return self.head(h)

    return Block, Model


def __getattr__(name):
    if name == "healthy":
        return make()
    if name == "planted":
        return make("tiny-blocks-planted", bug_in="blocks.1")
    if name == "forgetful":  # a port and a torch_block that both build every block as layer 0
        return make("tiny-blocks-forgetful", layered=True, forgets=("port", "torch_block"))
    if name == "hanging":
        return make("tiny-blocks-hanging", hang_in="blocks.1")
    if name == "layered":
        return make("tiny-blocks-layered", layered=True)
    if name == "straight_through":  # the model's blocks straight-through, `torch_block`'s not
        return make("tiny-blocks-straight-through", straight_through=True)
    if name == "rebuilt_wrong":  # the port is right, the torch_block builds every block as layer 0
        return make("tiny-blocks-rebuilt-wrong", layered=True, forgets=("torch_block",))
    raise AttributeError(name)
