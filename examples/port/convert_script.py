"""A team's own conversion, checked through ``Port(convert=...)``.

The PyTorch model is a small encoder: token and position embeddings, two blocks of
``nn.MultiheadAttention`` (its fused ``in_proj_weight`` (3E, E)) and a ``Linear`` with a residual each,
and a head tied to the token embedding. The JAX port is written as a JAX project writes it: Flax linen
with ``MultiHeadDotProductAttention`` (separate query, key and value kernels with a head axis,
``(E, H, D)``; ``out`` ``(H, D, E)``) and the head as ``embed.attend``. Nothing maps one tensor to
one leaf, so the team converts the checkpoint with a function of its own, ``convert``: that function is
what is checked, with the port.

A second port, ``scanned``, is a function of stacked weights that scans over its layers
(``jax.lax.scan``; each leaf ``(L, ...)``), converted by ``convert_scanned``; it returns its per-layer
outputs (``jax_intermediates``), so the verdict names the layer.

Planted conversion bugs (``BUGS``): q and k swapped, heads reshaped ``(D, H)`` instead of ``(H, D)``, a
head untied (filled from another tensor), layers stacked in the wrong order, a stacked kernel not
transposed. Run from the repository root::

    python examples/port/convert_script.py                                # the mapping, then the verdict
    crosscheck run --workload examples.port.convert_script:port           # the healthy port
    crosscheck run --workload examples.port.convert_script:qk_swapped --reference torch   # a bug
"""

from __future__ import annotations

import numpy as np

import crosscheck

#: Vocabulary, positions, width, heads, layers; a batch of 2 sequences of 5 tokens.
V, P, E, H, L = 12, 12, 8, 2, 2
D = E // H
B, S = 2, 5


def torch_model():
    """The original, in eval mode, every weight drawn with std 0.5 (biases too)."""
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.attn = nn.MultiheadAttention(E, H, batch_first=True)
            self.fc = nn.Linear(E, E)

        def forward(self, x):
            x = x + self.attn(x, x, x, need_weights=False)[0]
            return x + torch.tanh(self.fc(x))

    class Encoder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(V, E)
            self.pos = nn.Embedding(P, E)
            self.layers = nn.ModuleList([Block() for _ in range(L)])
            self.head = nn.Linear(E, V, bias=False)
            self.head.weight = self.embed.weight  # tied

        def forward(self, ids):
            x = self.embed(ids) + self.pos(torch.arange(ids.shape[1]))
            for layer in self.layers:
                x = layer(x)
            return self.head(x)

    torch.manual_seed(0)
    model = Encoder()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.5)
    return model.eval()


def flax_model(*, tied=True):
    """The port in Flax linen; ``tied=False``: a head of its own (``head/kernel``), as some ports keep."""
    import flax.linen as nn
    import jax.numpy as jnp

    class Block(nn.Module):
        @nn.compact
        def __call__(self, x):
            x = x + nn.MultiHeadDotProductAttention(num_heads=H, name="attn")(x)
            return x + jnp.tanh(nn.Dense(E, name="fc")(x))

    class Encoder(nn.Module):
        @nn.compact
        def __call__(self, ids):
            embed = nn.Embed(V, E, name="embed")
            x = embed(ids) + nn.Embed(P, E, name="pos")(jnp.arange(ids.shape[1]))
            for i in range(L):
                x = Block(name=f"layers_{i}")(x)
            return embed.attend(x) if tied else nn.Dense(V, use_bias=False, name="head")(x)

    return Encoder()


def convert(sd, *, swap_qk=(), heads_dh=(), head="tied"):
    """The team's conversion: a PyTorch ``state_dict`` (name -> array) -> the Flax port's variables.

    ``swap_qk`` and ``heads_dh`` (layer numbers) and ``head`` plant bugs: q and k swapped, heads
    reshaped (D, H) instead of (H, D), the untied port's head filled from ``"pos"`` (another tensor) or
    ``"zeros"`` instead of the tied embedding (``"embed"``)."""
    import jax.numpy as jnp

    def heads(w, i):  # PyTorch (out, in) -> Flax (in, H, D)
        if i in heads_dh:
            return w.T.reshape(E, D, H).transpose(0, 2, 1)
        return w.T.reshape(E, H, D)

    params = {"embed": {"embedding": sd["embed.weight"]}, "pos": {"embedding": sd["pos.weight"]}}
    for i in range(L):
        p = f"layers.{i}."
        q, k, v = jnp.split(sd[p + "attn.in_proj_weight"], 3)
        qb, kb, vb = jnp.split(sd[p + "attn.in_proj_bias"], 3)
        if i in swap_qk:
            q, k, qb, kb = k, q, kb, qb
        params[f"layers_{i}"] = {
            "attn": {
                "query": {"kernel": heads(q, i), "bias": qb.reshape(H, D)},
                "key": {"kernel": heads(k, i), "bias": kb.reshape(H, D)},
                "value": {"kernel": heads(v, i), "bias": vb.reshape(H, D)},
                "out": {
                    "kernel": sd[p + "attn.out_proj.weight"].T.reshape(H, D, E),
                    "bias": sd[p + "attn.out_proj.bias"],
                },
            },
            "fc": {"kernel": sd[p + "fc.weight"].T, "bias": sd[p + "fc.bias"]},
        }
    if head == "embed":
        params["head"] = {"kernel": sd["head.weight"].T}  # the tied alias of embed.weight
    elif head == "pos":
        params["head"] = {"kernel": sd["pos.weight"].T}
    elif head == "zeros":
        params["head"] = {"kernel": jnp.zeros((E, V), sd["embed.weight"].dtype)}
    return {"params": params}


def scanned(params, ids):
    """The port as a function of stacked weights, scanning over its layers; it returns its output and
    each layer's intermediates in PyTorch's module names (``jax_intermediates``)."""
    import jax
    import jax.numpy as jnp

    embedded, positions = params["embed"][ids], params["pos"][: ids.shape[1]]
    x = embedded + positions

    def layer(x, w):
        q, k, v = jnp.split(x @ w["qkv"] + w["qkv_bias"], 3, axis=-1)
        q, k, v = (t.reshape(*t.shape[:2], H, D) for t in (q, k, v))
        scores = jax.nn.softmax(jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(D), axis=-1)
        mixed = jnp.einsum("bhqk,bkhd->bqhd", scores, v).reshape(x.shape)
        attn = mixed @ w["out"] + w["out_bias"]
        x = x + attn
        fc = x @ w["fc"] + w["fc_bias"]
        x = x + jnp.tanh(fc)
        return x, (attn, fc, x)

    x, (attn, fc, out) = jax.lax.scan(layer, x, params["layers"])
    found = {"embed": embedded, "pos": positions}
    for i in range(L):
        found.update({f"layers.{i}.attn": attn[i], f"layers.{i}.fc": fc[i], f"layers.{i}": out[i]})
    return x @ params["embed"].T, found


def convert_scanned(sd, *, order=tuple(range(L)), transpose_fc=True):
    """The conversion to the scanned port: every layer's tensors stacked on a leading axis. ``order``
    and ``transpose_fc=False`` plant bugs: layers stacked in another order, the square ``fc`` kernels
    stacked without their transpose."""
    import jax.numpy as jnp

    def stack(name, transpose=False):
        return jnp.stack(
            [sd[f"layers.{i}.{name}"].T if transpose else sd[f"layers.{i}.{name}"] for i in order]
        )

    return {
        "embed": sd["embed.weight"],
        "pos": sd["pos.weight"],
        "layers": {
            "qkv": stack("attn.in_proj_weight", transpose=True),
            "qkv_bias": stack("attn.in_proj_bias"),
            "out": stack("attn.out_proj.weight", transpose=True),
            "out_bias": stack("attn.out_proj.bias"),
            "fc": stack("fc.weight", transpose=transpose_fc),
            "fc_bias": stack("fc.bias"),
        },
    }


def tokens(rng, dtype):
    """A batch of token ids (integers: the case's dtype does not apply)."""
    return {"ids": rng.integers(0, V, size=(B, S))}


def make_port(name="convert-script", *, tied=True, **bugs):
    return crosscheck.Port(
        name=name,
        torch=torch_model(),
        jax=flax_model(tied=tied),
        inputs=tokens,
        convert=lambda sd: convert(sd, **bugs),
        description="nn.MultiheadAttention encoder -> Flax linen, through the team's convert()",
    )


def make_scanned(name="convert-script-scanned", **bugs):
    return crosscheck.Port(
        name=name,
        torch=torch_model(),
        jax=scanned,
        inputs=tokens,
        convert=lambda sd: convert_scanned(sd, **bugs),
        jax_intermediates=[
            "embed",
            "pos",
            *(f"layers.{i}{m}" for i in range(L) for m in (".attn", ".fc", "")),
        ],
        description="nn.MultiheadAttention encoder -> a scan over stacked layers, through convert_scanned()",
    )


#: The planted conversion bugs: name -> (what it is, the module the verdict must name, how to make it).
BUGS = {
    "qk_swapped": ("layer 1's q and k swapped", "layers.1.attn", lambda n: make_port(n, swap_qk=(1,))),
    "heads_dh": (
        "layer 1's q, k and v kernels reshaped (E, D, H) and read as (E, H, D)",
        "layers.1.attn",
        lambda n: make_port(n, heads_dh=(1,)),
    ),
    "head_untied": (
        "the untied port's head filled from the position embedding, not the tied token embedding",
        "head",
        lambda n: make_port(n, tied=False, head="pos"),
    ),
    "layers_reversed": (
        "the scanned port's layers stacked in reverse order",
        "layers.0.attn",
        lambda n: make_scanned(n, order=tuple(reversed(range(L)))),
    ),
    "kernel_not_transposed": (
        "the scanned port's square fc kernels stacked without their transpose",
        "layers.0.fc",
        lambda n: make_scanned(n, transpose_fc=False),
    ),
}

port = make_port()
untied = make_port("convert-script-untied", tied=False, head="embed")
scanned_port = make_scanned()
qk_swapped = BUGS["qk_swapped"][2]("convert-script-qk-swapped")
heads_dh = BUGS["heads_dh"][2]("convert-script-heads-dh")
head_untied = BUGS["head_untied"][2]("convert-script-head-untied")
layers_reversed = BUGS["layers_reversed"][2]("convert-script-layers-reversed")
kernel_not_transposed = BUGS["kernel_not_transposed"][2]("convert-script-kernel-not-transposed")


if __name__ == "__main__":
    print(port.mapping)
    report = crosscheck.run(workload=port)
    print(report.backends["jax"].notes["port"]["text"])
    print("PASSED" if report.passed else f"FAILED: {report.problems[0]}")
    raise SystemExit(0 if report.passed else 1)
