"""A deep stack of small blocks (``Linear``, ``tanh``, ``LayerNorm``), PyTorch against Flax linen: 200
parameter tensors at the default depth, for the report of a model of real size.

Run from the repository root::

    crosscheck run --workload examples.port.deep:port --reference torch
"""

from __future__ import annotations

import crosscheck

#: Blocks, and each block's width: 50 blocks of 4 tensors (a kernel, a bias, a scale and a shift).
DEPTH, WIDTH = 50, 4


def make_port(name="deep", *, depth=DEPTH, epsilon=1e-5):
    import flax.linen as nn
    import jax.numpy as jnp
    import torch

    class TorchBlock(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc, self.norm = torch.nn.Linear(WIDTH, WIDTH), torch.nn.LayerNorm(WIDTH)

        def forward(self, x):
            return self.norm(torch.tanh(self.fc(x)))

    class TorchDeep(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = torch.nn.ModuleList(TorchBlock() for _ in range(depth))

        def forward(self, x):
            for block in self.blocks:
                x = block(x)
            return x

    class FlaxBlock(nn.Module):
        @nn.compact
        def __call__(self, x):
            return nn.LayerNorm(epsilon=epsilon, name="norm")(jnp.tanh(nn.Dense(WIDTH, name="fc")(x)))

    class FlaxDeep(nn.Module):
        @nn.compact
        def __call__(self, x):
            for i in range(depth):
                x = FlaxBlock(name=f"blocks_{i}")(x)
            return x

    torch.manual_seed(0)
    return crosscheck.Port(
        name=name,
        torch=TorchDeep().eval(),
        jax=FlaxDeep(),
        inputs=lambda rng, dtype: {"x": rng.standard_normal((3, WIDTH)).astype(dtype)},
        description=f"{depth} blocks of Linear, tanh and LayerNorm ({4 * depth} tensors)",
    )


port = make_port()
#: A planted bug: the port's LayerNorm epsilon is Flax's default 1e-6, not PyTorch's 1e-5.
epsilon = make_port("deep-epsilon", epsilon=1e-6)
