"""A stack of residual MLP layers ported to Flax linen with ``nn.scan`` over its layers and an
``nn.remat`` (``jax.checkpoint``) body, mapped with no override, with planted bugs (``BUGS``).

The PyTorch original keeps its ``L`` layers in an ``nn.ModuleList``: ``layers.{i}.norm``,
``layers.{i}.fc1`` and ``layers.{i}.fc2``, each layer ``x + fc2(gelu(fc1(norm(x))))``, between an input
projection ``embed`` and a final ``norm``. The linen port scans one layer's module over the stack
(``nn.scan(nn.remat(Layer), variable_axes={"params": 0}, length=L)``), so each of its parameters is one
leaf with the layers on its leading axis: ``params/layers/fc1/kernel`` ``(L, D, H)`` for PyTorch's
``layers.{i}.fc1.weight`` ``(H, D)``. The mapping finds it without an override (each row maps one layer,
"stacked: layer i of L on axis 0"), and the module by module comparison names the layer where a
difference starts (``layers.2.fc1``): each step's outputs are read as the scan runs.

Run from the repository root::

    crosscheck run --workload examples.port.scanned_linen:port --reference torch
    crosscheck run --workload examples.port.scanned_linen:layer_order --reference torch --quiet
"""

from __future__ import annotations

import crosscheck

#: Layers, width, MLP width, and the inputs' batch and sequence length.
L, D, HIDDEN, BATCH, SEQ = 4, 8, 16, 2, 3


def torch_model():
    """The original: ``embed``, ``L`` residual MLP layers in a ``ModuleList``, a final ``norm``."""
    import torch
    from torch import nn

    class Layer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm, self.fc1, self.act, self.fc2 = (
                nn.LayerNorm(D),
                nn.Linear(D, HIDDEN),
                nn.GELU(),
                nn.Linear(HIDDEN, D),
            )

        def forward(self, x):
            return x + self.fc2(self.act(self.fc1(self.norm(x))))

    class Stack(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Linear(D, D)
            self.layers = nn.ModuleList(Layer() for _ in range(L))
            self.norm = nn.LayerNorm(D)

        def forward(self, x):
            x = self.embed(x)
            for layer in self.layers:
                x = layer(x)
            return self.norm(x)

    torch.manual_seed(0)
    model = Stack()
    with torch.no_grad():  # LayerNorm's scale and shift away from 1 and 0, so that a mix-up shows
        for module in model.modules():
            if isinstance(module, nn.LayerNorm):
                module.weight.uniform_(0.5, 1.5)
                module.bias.uniform_(-0.5, 0.5)
    return model.eval()


def flax_model(*, reverse=False, epsilon=1e-5):
    """The port in Flax linen: ``nn.scan`` over ``nn.remat(Layer)``. The keywords plant bugs:
    ``reverse=True`` (the scan runs the layers last to first: the layers stacked in the wrong order),
    ``epsilon=1e-6`` (Flax's default LayerNorm epsilon; PyTorch's is 1e-5)."""
    import flax.linen as nn

    class Layer(nn.Module):
        @nn.compact
        def __call__(self, x, _):
            h = nn.LayerNorm(epsilon=epsilon, name="norm")(x)
            h = nn.gelu(nn.Dense(HIDDEN, name="fc1")(h), approximate=False)
            return x + nn.Dense(D, name="fc2")(h), None

    class Stack(nn.Module):
        @nn.compact
        def __call__(self, x):
            x = nn.Dense(D, name="embed")(x)
            scanned = nn.scan(
                nn.remat(Layer),  # the body is checkpointed: recomputed in the backward pass
                variable_axes={"params": 0},
                split_rngs={"params": True},
                length=L,
                reverse=reverse,
            )
            x, _ = scanned(name="layers")(x, None)
            return nn.LayerNorm(epsilon=1e-5, name="norm")(x)

    return Stack()


def tokens(rng, dtype):
    """A batch of two sequences of three tokens, ``(B, S, D)``."""
    return {"x": rng.standard_normal((BATCH, SEQ, D)).astype(dtype)}


def make_port(name="scanned-linen", **bugs):
    return crosscheck.Port(
        name=name,
        torch=torch_model(),
        jax=flax_model(**bugs),
        inputs=tokens,
        description=f"{L} residual MLP layers, PyTorch ModuleList -> Flax linen nn.scan + nn.remat",
    )


#: The planted bugs: name -> (what it is, the module the verdict must name, the bug's keywords).
BUGS = {
    "layer_order": (
        "the scan runs the layers last to first (stacked in the wrong order): each layer computes "
        "PyTorch's from its input, the top module feeds it another (the verdict names no module)",
        "",
        {"reverse": True},
    ),
    "epsilon": (
        "Flax's default LayerNorm epsilon 1e-6, not PyTorch's 1e-5",
        "layers.0.norm",
        {"epsilon": 1e-6},
    ),
}

port = make_port()
layer_order = make_port("scanned-linen-layer-order", **BUGS["layer_order"][2])
epsilon = make_port("scanned-linen-epsilon", **BUGS["epsilon"][2])
