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
in the conversion. What it shares with ``llama_nnx`` (the config but its depth, the tokens, the rotary
embedding, the attention and its bugs) is imported from there. Run from the repository root::

    crosscheck run --workload examples.port.llama_nnx_scanned:port --reference torch
    crosscheck run --workload examples.port.llama_nnx_scanned:qkv_order --reference torch
"""

from __future__ import annotations

import crosscheck
from examples.port import llama_nnx
from examples.port.llama_nnx import EPS, KV, D, E, F, H, V, tokens

#: Three layers (the Llama example's width, heads and vocabulary), an untied head.
L = 3
CONFIG = {**llama_nnx.CONFIG, "num_hidden_layers": L, "tie_word_embeddings": False}


def torch_model():
    """Hugging Face's ``LlamaForCausalLM`` of ``CONFIG``, seeded."""
    return llama_nnx.torch_model(CONFIG, lm_head=True)


def nnx_model(*, order="qkv", causal=True, rope="half"):
    """The port. The keywords plant bugs in every layer: ``order="kqv"`` splits the fused kernel's heads
    in the wrong order, ``causal=False`` forgets the mask, ``rope="interleaved"`` rotates neighbouring
    pairs (Meta's layout) where Hugging Face rotates the two halves."""
    import jax
    import jax.numpy as jnp
    from flax import nnx

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
            heads = jnp.einsum("bse,ehd->bshd", x, self.wqkv[...])
            at = llama_nnx.parts(order, {"q": H, "k": KV, "v": KV})
            q, k, v = (heads[:, :, slice(*at[p])] for p in "qkv")
            mixed = llama_nnx.attend(q, k, v, dtype=x.dtype, rope=rope, causal=causal)
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
#: keywords of ``make_port``): the Llama example's, named under ``LlamaForCausalLM``'s ``model.``, and a
#: conversion's.
BUGS = {
    **{name: (what, f"model.{where}", how) for name, (what, where, how) in llama_nnx.BUGS.items()},
    "gate_up_swapped": (
        "the conversion stacks up before gate in the fused wi",
        "model.layers.0.mlp",
        dict(gate_up="up_gate"),
    ),
}


__getattr__ = llama_nnx.lazy_ports(make_port, "llama-nnx-scanned", BUGS)
