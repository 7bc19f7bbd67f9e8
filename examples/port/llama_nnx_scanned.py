"""Hugging Face's ``LlamaForCausalLM`` (a tiny config, grouped-query attention, an untied head) against a
Flax nnx port written as a JAX team writes it, under its own names, converted by its own function.

The port: ``tok_embeddings``, then ``blocks`` (``nnx.vmap`` builds the layers, every parameter stacked on
a leading axis of ``L``; ``nnx.scan`` runs them), each with ``attention_norm``, ``attention`` (one fused
einsum kernel ``wqkv`` ``(E, H + 2 KV, D)`` for q, k and v, heads on its middle axis, and ``wo``
``(H, D, E)``), ``ffn_norm`` and ``feed_forward`` (gate and up fused in ``wi`` ``(2, E, F)``, ``wo``
``(F, E)``), then ``final_norm`` and ``output``. No PyTorch name reads as a JAX one, so the team
converts the checkpoint with ``convert``: that function is what maps the port, and what the check
reads to pair each PyTorch layer ``model.layers.{i}`` with the scan's step ``i`` that its weights feed.

Planted bugs (``BUGS``), each in every layer: q, k and v split from ``wqkv`` in the wrong order, the
causal mask forgotten, the rotary embedding of Meta's layout (neighbouring pairs), gate and up swapped
in the conversion. Run from the repository root::

    crosscheck run --workload examples.port.llama_nnx_scanned:port --reference torch
    crosscheck run --workload examples.port.llama_nnx_scanned:qkv_order --reference torch
"""

from __future__ import annotations

import crosscheck

#: Vocabulary, width, layers, query heads, key/value heads, MLP width; head width ``E // H``.
V, E, L, H, KV, F = 16, 16, 3, 2, 1, 32
D = E // H
EPS = 1e-6
CONFIG = dict(
    vocab_size=V,
    hidden_size=E,
    num_hidden_layers=L,
    num_attention_heads=H,
    num_key_value_heads=KV,
    intermediate_size=F,
    max_position_embeddings=16,
    rms_norm_eps=EPS,
    initializer_range=0.5,  # O(1) pre-activations, as trained weights have (see examples/port/gpt2.py)
    tie_word_embeddings=False,
    use_cache=False,
    attn_implementation="eager",
)


def tokens(rng, dtype):
    """Two sequences of 6 token ids."""
    import numpy as np

    return {"input_ids": rng.integers(0, V, size=(2, 6)).astype(np.int64)}


def torch_model():
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(**CONFIG)).eval()


def nnx_model(*, order="qkv", causal=True, rope="half"):
    """The port. The keywords plant bugs in every layer: ``order="kqv"`` splits the fused kernel's heads
    in the wrong order, ``causal=False`` forgets the mask, ``rope="interleaved"`` rotates neighbouring
    pairs (Meta's layout) where Hugging Face rotates the two halves."""
    import jax
    import jax.numpy as jnp
    from flax import nnx

    def rotary(x):  # x: (B, S, heads, D)
        inv = 1.0 / (10000.0 ** (jnp.arange(0, D, 2, dtype=x.dtype) / D))
        angle = jnp.arange(x.shape[1], dtype=x.dtype)[:, None] * inv[None]
        if rope == "interleaved":
            cos, sin = jnp.cos(angle)[None, :, None], jnp.sin(angle)[None, :, None]
            a, b = x[..., 0::2], x[..., 1::2]
            return jnp.stack([a * cos - b * sin, a * sin + b * cos], -1).reshape(x.shape)
        both = jnp.concatenate([angle, angle], -1)
        cos, sin = jnp.cos(both)[None, :, None], jnp.sin(both)[None, :, None]
        return x * cos + jnp.concatenate([-x[..., D // 2 :], x[..., : D // 2]], -1) * sin

    def param(rngs, *shape):
        return nnx.Param(jax.random.normal(rngs.params(), shape) * 0.5)

    class RMSNorm(nnx.Module):
        def __init__(self, rngs):
            self.scale = nnx.Param(jnp.ones((E,)))

        def __call__(self, x):
            return x * jax.lax.rsqrt(jnp.mean(x * x, -1, keepdims=True) + EPS) * self.scale[...]

    class Attention(nnx.Module):
        def __init__(self, rngs):
            self.wqkv = param(rngs, E, H + 2 * KV, D)
            self.wo = param(rngs, H, D, E)

        def __call__(self, x):
            s = x.shape[1]
            heads = jnp.einsum("bse,ehd->bshd", x, self.wqkv[...])
            sizes = {"q": H, "k": KV, "v": KV}
            at, parts = 0, {}
            for part in order:
                parts[part] = heads[:, :, at : at + sizes[part]]
                at += sizes[part]
            q, k, v = rotary(parts["q"]), rotary(parts["k"]), parts["v"]
            k, v = jnp.repeat(k, H // KV, axis=2), jnp.repeat(v, H // KV, axis=2)
            scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / jnp.sqrt(jnp.asarray(D, x.dtype))
            if causal:
                scores = jnp.where(jnp.tril(jnp.ones((s, s), bool)), scores, jnp.finfo(x.dtype).min)
            mixed = jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(scores, -1), v)
            return jnp.einsum("bqhd,hde->bqe", mixed, self.wo[...])

    class FeedForward(nnx.Module):
        def __init__(self, rngs):
            self.wi = param(rngs, 2, E, F)
            self.wo = param(rngs, F, E)

        def __call__(self, x):
            gate, up = jnp.einsum("bse,gef->gbsf", x, self.wi[...])
            return (jax.nn.silu(gate) * up) @ self.wo[...]

    class Block(nnx.Module):
        def __init__(self, rngs):
            self.attention_norm = RMSNorm(rngs)
            self.attention = Attention(rngs)
            self.ffn_norm = RMSNorm(rngs)
            self.feed_forward = FeedForward(rngs)

        def __call__(self, x):
            x = x + self.attention(self.attention_norm(x))
            return x + self.feed_forward(self.ffn_norm(x))

    class Transformer(nnx.Module):
        def __init__(self, rngs):
            self.tok_embeddings = nnx.Embed(V, E, rngs=rngs)

            @nnx.split_rngs(splits=L)
            @nnx.vmap(in_axes=(0,), out_axes=0)
            def blocks(rngs):
                return Block(rngs)

            self.blocks = blocks(rngs)
            self.final_norm = RMSNorm(rngs)
            self.output = nnx.Linear(E, V, use_bias=False, rngs=rngs)

        def __call__(self, input_ids):
            @nnx.scan(in_axes=(nnx.Carry, 0), out_axes=nnx.Carry)
            def run(x, block):
                return block(x)

            # the table looked up directly (nnx.Embed computes in the dtype it was built with)
            x = jnp.take(self.tok_embeddings.embedding[...], input_ids, axis=0)
            return self.output(self.final_norm(run(x, self.blocks)))

    model = Transformer(nnx.Rngs(0))
    model.eval()
    return model


def convert(sd, *, gate_up="gate_up"):
    """The team's conversion: a PyTorch ``state_dict`` (name -> array) -> the port's parameters, every
    layer's tensors stacked on a leading axis. ``gate_up="up_gate"`` plants a bug: gate and up swapped."""
    import jax.numpy as jnp

    def layers(name, how):
        return jnp.stack([how(sd[f"model.layers.{i}.{name}"], i) for i in range(L)])

    def qkv(_, i):  # (out, in) each -> (E, H + 2 KV, D): the heads of q, then k, then v
        p = f"model.layers.{i}.self_attn."
        parts = [sd[p + n + "_proj.weight"].T.reshape(E, -1, D) for n in "qkv"]
        return jnp.concatenate(parts, axis=1)

    def gate_and_up(_, i):
        p = f"model.layers.{i}.mlp."
        pair = [sd[p + n + "_proj.weight"].T for n in gate_up.split("_")]
        return jnp.stack(pair)

    return {
        "tok_embeddings": {"embedding": sd["model.embed_tokens.weight"]},
        "blocks": {
            "attention_norm": {"scale": layers("input_layernorm.weight", lambda w, i: w)},
            "attention": {
                "wqkv": layers("self_attn.q_proj.weight", qkv),
                "wo": layers("self_attn.o_proj.weight", lambda w, i: w.T.reshape(H, D, E)),
            },
            "ffn_norm": {"scale": layers("post_attention_layernorm.weight", lambda w, i: w)},
            "feed_forward": {
                "wi": layers("mlp.gate_proj.weight", gate_and_up),
                "wo": layers("mlp.down_proj.weight", lambda w, i: w.T),
            },
        },
        "final_norm": {"scale": sd["model.norm.weight"]},
        "output": {"kernel": sd["lm_head.weight"].T},
    }


def make_port(name="llama-nnx-scanned", *, gate_up="gate_up", **bugs):
    return crosscheck.Port(
        name=name,
        torch=torch_model(),
        jax=nnx_model(**bugs),
        inputs=tokens,
        jax_call=lambda model, inputs: model(inputs["input_ids"]),
        convert=lambda sd: convert(sd, gate_up=gate_up),
        description="Hugging Face Llama (3 layers, GQA) against an nnx port of its own names: "
        "nnx.vmap-built layers run by nnx.scan, a fused qkv einsum, the team's convert()",
    )


#: The planted bugs, each in every layer: name -> (what it is, the module the verdict must name, the
#: keywords of ``make_port``).
BUGS = {
    "qkv_order": (
        "the fused kernel's heads split k, q, v instead of q, k, v",
        "model.layers.0.self_attn",
        dict(order="kqv"),
    ),
    "no_causal_mask": ("the causal mask forgotten", "model.layers.0.self_attn", dict(causal=False)),
    "rope_interleaved": (
        "the rotary embedding of Meta's layout (neighbouring pairs) against Hugging Face's (two halves)",
        "model.layers.0.self_attn",
        dict(rope="interleaved"),
    ),
    "gate_up_swapped": (
        "the conversion stacks up before gate in the fused wi",
        "model.layers.0.mlp",
        dict(gate_up="up_gate"),
    ),
}


def __getattr__(name):  # the ports are built when asked for: importing this module imports no framework
    if name == "port":
        return make_port()
    if name in BUGS:
        return make_port(f"llama-nnx-scanned-{name.replace('_', '-')}", **BUGS[name][2])
    raise AttributeError(name)
