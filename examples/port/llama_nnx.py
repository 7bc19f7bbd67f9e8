"""Hugging Face's Llama (a tiny config, grouped-query attention) against a Flax nnx port of one's own,
written the way JAX projects write it: the layers stacked (``nnx.vmap`` builds them, ``nnx.scan`` runs
them, each step in ``nnx.remat``: the brief's scan + checkpoint pattern) and the attention's q, k and v
fused into one ``qkv_proj``. Mapped with no override: each PyTorch ``layers.{i}.X`` lands on layer ``i``
of a stacked leaf, ``q_proj``/``k_proj``/``v_proj`` on their slices of ``qkv_proj`` (in that order,
k and v narrower: one key/value head for two query heads). Planted bugs in ``BUGS``. The config, the
rotary embedding, the attention and the bugs serve ``llama_nnx_scanned`` too.

Run from the repository root::

    crosscheck run --workload examples.port.llama_nnx:port --reference torch
    crosscheck run --workload examples.port.llama_nnx:port                      # the default reference
    crosscheck run --workload examples.port.llama_nnx:rope_interleaved --reference torch
"""

from __future__ import annotations

import crosscheck

#: Vocabulary, width, layers, query heads, key/value heads, MLP width; head width ``E // H``.
V, E, L, H, KV, F = 16, 16, 4, 2, 1, 32
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
    # std 0.5, not Llama's 0.02: at 0.02 every pre-activation is ~0.05, where many bugs sit below
    # float32's rounding (see examples/port/gpt2.py); trained weights are O(1) there.
    initializer_range=0.5,
    use_cache=False,
    attn_implementation="eager",
)


def tokens(rng, dtype):
    """Two sequences of 6 token ids (causal attention, every position attended)."""
    import numpy as np

    return {"input_ids": rng.integers(0, V, size=(2, 6)).astype(np.int64)}


def torch_model(config=CONFIG, *, lm_head=False):
    """Hugging Face's Llama of ``config`` (``LlamaForCausalLM`` with ``lm_head``), seeded."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, LlamaModel

    torch.manual_seed(0)
    return (LlamaForCausalLM if lm_head else LlamaModel)(LlamaConfig(**config)).eval()


def rotary(x, rope="half"):
    """The rotary embedding of ``x`` ``(B, S, heads, D)``: Hugging Face's (the two halves rotated), or
    ``rope="interleaved"``, Meta's original layout (pairs of neighbouring entries)."""
    import jax.numpy as jnp

    inv = 1.0 / (10000.0 ** (jnp.arange(0, D, 2, dtype=x.dtype) / D))
    angle = jnp.arange(x.shape[1], dtype=x.dtype)[:, None] * inv[None]
    if rope == "interleaved":  # Meta's layout: pairs (2i, 2i + 1)
        cos, sin = jnp.cos(angle)[None, :, None], jnp.sin(angle)[None, :, None]
        a, b = x[..., 0::2], x[..., 1::2]
        return jnp.stack([a * cos - b * sin, a * sin + b * cos], -1).reshape(x.shape)
    both = jnp.concatenate([angle, angle], -1)
    cos, sin = jnp.cos(both)[None, :, None], jnp.sin(both)[None, :, None]
    half = jnp.concatenate([-x[..., D // 2 :], x[..., : D // 2]], -1)
    return x * cos + half * sin


def parts(order, sizes):
    """Where q, k and v sit in a projection fused in ``order`` (``"qkv"``; a wrong order plants a bug):
    ``{part: (start, stop)}`` along the fused axis, each ``sizes[part]`` long."""
    found, at = {}, 0
    for part in order:
        found[part] = (at, at + sizes[part])
        at += sizes[part]
    return found


def attend(q, k, v, *, dtype, rope="half", causal=True):
    """Grouped-query attention of ``q`` ``(B, S, H, D)`` over ``k`` and ``v`` ``(B, S, KV, D)``, the rotary
    embedding applied to ``q`` and ``k``: ``(B, S, H, D)``. ``causal=False`` forgets the mask (a bug)."""
    import jax
    import jax.numpy as jnp

    s = q.shape[1]
    q, k = rotary(q, rope), rotary(k, rope)
    k, v = jnp.repeat(k, H // KV, axis=2), jnp.repeat(v, H // KV, axis=2)
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / jnp.sqrt(jnp.asarray(D, dtype))
    if causal:
        scores = jnp.where(jnp.tril(jnp.ones((s, s), bool)), scores, jnp.finfo(dtype).min)
    return jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(scores, -1), v)


def nnx_model(*, rope="half", order="qkv", causal=True):
    """The port in Flax nnx. The keywords plant bugs: ``rope="interleaved"`` rotates pairs of
    neighbouring entries (Meta's original Llama) where Hugging Face's rotates the two halves;
    ``order="kqv"`` splits the fused projection in the wrong order; ``causal=False`` forgets the mask."""
    import jax
    import jax.numpy as jnp
    from flax import nnx

    class Attention(nnx.Module):
        def __init__(self, rngs):
            self.qkv_proj = nnx.Linear(E, (H + 2 * KV) * D, use_bias=False, rngs=rngs)
            self.o_proj = nnx.Linear(H * D, E, use_bias=False, rngs=rngs)

        def __call__(self, x):
            b, s, _ = x.shape
            fused = self.qkv_proj(x)
            at = parts(order, {"q": H * D, "k": KV * D, "v": KV * D})
            q, k, v = (fused[..., slice(*at[p])] for p in "qkv")
            q, k, v = q.reshape(b, s, H, D), k.reshape(b, s, KV, D), v.reshape(b, s, KV, D)
            out = attend(q, k, v, dtype=x.dtype, rope=rope, causal=causal)
            return self.o_proj(out.reshape(b, s, H * D))

    class MLP(nnx.Module):
        def __init__(self, rngs):
            self.gate_proj = nnx.Linear(E, F, use_bias=False, rngs=rngs)
            self.up_proj = nnx.Linear(E, F, use_bias=False, rngs=rngs)
            self.down_proj = nnx.Linear(F, E, use_bias=False, rngs=rngs)

        def __call__(self, x):
            return self.down_proj(jax.nn.silu(self.gate_proj(x)) * self.up_proj(x))

    class Block(nnx.Module):
        def __init__(self, rngs):
            self.input_layernorm = nnx.RMSNorm(E, epsilon=EPS, rngs=rngs)
            self.self_attn = Attention(rngs)
            self.post_attention_layernorm = nnx.RMSNorm(E, epsilon=EPS, rngs=rngs)
            self.mlp = MLP(rngs)

        def __call__(self, x):
            x = x + self.self_attn(self.input_layernorm(x))
            return x + self.mlp(self.post_attention_layernorm(x))

    class Llama(nnx.Module):
        def __init__(self, rngs):
            self.embed_tokens = nnx.Embed(V, E, rngs=rngs)

            @nnx.split_rngs(splits=L)
            @nnx.vmap(in_axes=(0,), out_axes=0)
            def blocks(rngs):
                return Block(rngs)

            self.layers = blocks(rngs)  # one module, every parameter stacked on a leading axis of L
            self.norm = nnx.RMSNorm(E, epsilon=EPS, rngs=rngs)

        def __call__(self, input_ids):
            @nnx.scan(in_axes=(nnx.Carry, 0), out_axes=nnx.Carry)
            @nnx.remat
            def body(x, block):
                return block(x)

            # the table looked up directly: nnx.Embed computes in the dtype its table had when it was
            # built (float32), whatever it holds later, which would pin a float64 check to float32
            x = jnp.take(self.embed_tokens.embedding[...], input_ids, axis=0)
            return self.norm(body(x, self.layers))

    model = Llama(nnx.Rngs(0))
    model.eval()
    return model


def make_port(name="llama-nnx", **bugs):
    return crosscheck.Port(
        name=name,
        torch=torch_model(),
        jax=nnx_model(**bugs),
        inputs=tokens,
        jax_call=lambda model, inputs: model(inputs["input_ids"]),
        description="Hugging Face Llama (4 layers, GQA) against an nnx port: scanned layers, fused qkv",
    )


#: The planted bugs: name -> (what it is, the module the verdict must name, how to make the port).
BUGS = {
    "rope_interleaved": (
        "the rotary embedding of Meta's original layout (pairs of neighbours) against Hugging Face's "
        "(two halves), with the weights as Hugging Face stores them: the q/k row permutation is missing",
        "layers.0.self_attn",
        dict(rope="interleaved"),
    ),
    "qkv_order": (
        "the fused projection split k, q, v instead of q, k, v",
        "layers.0.self_attn",
        dict(order="kqv"),
    ),
    "no_causal_mask": ("the causal mask forgotten", "layers.0.self_attn", dict(causal=False)),
}


def lazy_ports(make_port, prefix, bugs):
    """A module's ``__getattr__`` building its ports when asked for (importing the module imports no
    framework): ``port`` the healthy one, each name of ``bugs`` a planted bug's (``{prefix}-{name}``)."""

    def __getattr__(name):
        if name == "port":
            return make_port()
        if name in bugs:
            return make_port(f"{prefix}-{name.replace('_', '-')}", **bugs[name][2])
        raise AttributeError(name)

    return __getattr__


__getattr__ = lazy_ports(make_port, "llama-nnx", BUGS)
