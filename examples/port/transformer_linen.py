"""PyTorch's ``nn.TransformerEncoder`` against a Flax linen port written the natural way, with
``nn.MultiHeadDotProductAttention``: mapped with no override, and a planted bug (``BUGS``).

The two keep attention's weights differently. PyTorch's ``nn.MultiheadAttention`` fuses the query,
key and value projections into one ``in_proj_weight`` ``(3E, E)`` (and ``in_proj_bias`` ``(3E,)``);
Flax keeps one ``DenseGeneral`` per projection, its kernel ``(E, H, D)`` with the heads on their own
axes, and an output kernel ``(H, D, E)`` where PyTorch has ``out_proj`` ``(E, E)`` (a
``NonDynamicallyQuantizableLinear``: a subclass of ``nn.Linear``, whose layout is found through its
base). The mapping splits ``in_proj_weight`` in PyTorch's q, k, v order, transposes each part (the
layouts decide: ``out,in`` against ``DenseGeneral``'s input axes then output axes) and reshapes it to
the heads; the table shows each step. The port's LayerNorms take PyTorch's epsilon (1e-5; Flax's
default is 1e-6).

Run from the repository root::

    crosscheck run --workload examples.port.transformer_linen:port --reference torch
    crosscheck run --workload examples.port.transformer_linen:port
    crosscheck run --workload examples.port.transformer_linen:swapped_qk --reference torch
    crosscheck run --workload examples.port.transformer_linen:scanned --reference torch

``scanned`` is the same port written with ``nn.scan`` over ``nn.remat`` of its layer: each PyTorch
``layers.{i}.X`` lands on layer ``i`` of a stacked leaf, ``in_proj_weight``'s q, k, v on their stacked
``query``, ``key``, ``value`` kernels; a difference inside the scan is still named by layer and module.
"""

from __future__ import annotations

import crosscheck

#: Width, heads, feed-forward width, layers, and the inputs' batch and sequence length.
E, HEADS, HIDDEN, LAYERS, BATCH, SEQ = 8, 2, 16, 2, 2, 5


def torch_model():
    """The original: two post-LayerNorm encoder layers (batch first, no dropout), in eval mode."""
    import torch
    from torch import nn

    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(E, HEADS, HIDDEN, dropout=0.0, batch_first=True)
    model = nn.TransformerEncoder(layer, LAYERS, enable_nested_tensor=False)
    with torch.no_grad():  # biases and LayerNorms away from 0 and 1, so that a mix-up shows
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.uniform_(-0.5, 0.5)
            elif "norm" in name:
                p.uniform_(0.5, 1.5)
    return model.eval()


def flax_model(*, swap_qk=False, scan=False):
    """The port in Flax linen. ``swap_qk=True`` plants a bug: the attention reads the key projection
    for the queries and the query projection for the keys (the weights of each in the right place).
    ``scan=True`` writes it as JAX projects do: ``nn.scan`` over ``nn.remat(layer)``, every parameter
    stacked on a leading axis of ``LAYERS`` (``params/layers/self_attn/query/kernel`` ``(2, 8, 2, 4)``)."""
    import flax.linen as nn

    class SwappedAttention(nn.Module):
        """``MultiHeadDotProductAttention``'s parameters, with queries and keys swapped."""

        @nn.compact
        def __call__(self, x):
            head = E // HEADS
            project = {n: nn.DenseGeneral((HEADS, head), name=n) for n in ("query", "key", "value")}
            q, k, v = project["key"](x), project["query"](x), project["value"](x)
            y = nn.dot_product_attention(q, k, v)
            return nn.DenseGeneral(E, axis=(-2, -1), name="out")(y)

    class EncoderLayer(nn.Module):
        def setup(self):
            self.self_attn = SwappedAttention() if swap_qk else nn.MultiHeadDotProductAttention(HEADS)
            self.linear1, self.linear2 = nn.Dense(HIDDEN), nn.Dense(E)
            self.norm1, self.norm2 = nn.LayerNorm(epsilon=1e-5), nn.LayerNorm(epsilon=1e-5)

        def __call__(self, x):
            x = self.norm1(x + self.self_attn(x))
            return self.norm2(x + self.linear2(nn.relu(self.linear1(x))))

    class ScannedLayer(EncoderLayer):
        def __call__(self, x, _):  # nn.scan's signature: (carry, per-step input) -> (carry, output)
            return super().__call__(x), None

    class Encoder(nn.Module):
        def setup(self):
            self.layers = [EncoderLayer() for _ in range(LAYERS)]

        def __call__(self, src):
            for layer in self.layers:
                src = layer(src)
            return src

    class ScannedEncoder(nn.Module):
        def setup(self):
            stack = nn.scan(
                nn.remat(ScannedLayer),
                variable_axes={"params": 0},
                split_rngs={"params": True},
                length=LAYERS,
            )
            self.layers = stack()

        def __call__(self, src):
            return self.layers(src, None)[0]

    return ScannedEncoder() if scan else Encoder()


def tokens(rng, dtype):
    """A batch of sequences, ``(B, S, E)``."""
    return {"src": rng.standard_normal((BATCH, SEQ, E)).astype(dtype)}


def make_port(name="transformer-linen", **bugs):
    return crosscheck.Port(
        name=name,
        torch=torch_model(),
        jax=flax_model(**bugs),
        inputs=tokens,
        description="nn.TransformerEncoder against Flax MultiHeadDotProductAttention (fused in_proj split)",
    )


#: The planted bugs: name -> (what it is, the module the verdict must name, the bug's keywords).
BUGS = {
    "swapped_qk": ("queries and keys swapped in the attention", "layers.0.self_attn", {"swap_qk": True}),
    "scanned_swapped_qk": (
        "the same bug in the scanned port",
        "layers.0.self_attn",
        {"swap_qk": True, "scan": True},
    ),
}


def __getattr__(name):  # the ports are built when asked for: importing this module imports no framework
    if name == "port":
        return make_port()
    if name == "scanned":  # the port written with nn.scan over its layers
        return make_port("transformer-linen-scanned", scan=True)
    if name in BUGS:
        return make_port(f"transformer-linen-{name.replace('_', '-')}", **BUGS[name][2])
    raise AttributeError(name)
