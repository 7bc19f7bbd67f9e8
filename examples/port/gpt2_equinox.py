"""Hugging Face's GPT-2 language model against an Equinox port written the way JAX projects write it:
the blocks stacked (``eqx.filter_vmap`` builds them, ``jax.lax.scan`` runs them, each step in
``jax.checkpoint``) and the output head tied to the token embedding (``x @ wte.weight.T``: one leaf,
as PyTorch's ``lm_head.weight`` is ``transformer.wte.weight``). The scan returns each block's outputs
stacked, listed for the module by module comparison as ``transformer.h.*.X`` (``jax_intermediates``).
Planted bugs in ``BUGS``.

Run from the repository root::

    crosscheck run --workload examples.port.gpt2_equinox:port --reference torch
    crosscheck run --workload examples.port.gpt2_equinox:port                      # the default reference
    crosscheck run --workload examples.port.gpt2_equinox:untied_head --reference torch
"""

from __future__ import annotations

import crosscheck

#: Vocabulary, positions, width, layers, heads; the MLP is 4 x wider.
V, P, E, L, H = 16, 8, 8, 3, 2
CONFIG = dict(
    vocab_size=V,
    n_positions=P,
    n_embd=E,
    n_layer=L,
    n_head=H,
    resid_pdrop=0.0,
    embd_pdrop=0.0,
    attn_pdrop=0.0,
    use_cache=False,
    initializer_range=0.5,  # trained-size activations (see examples/port/gpt2.py)
    attn_implementation="eager",
)
#: The PyTorch modules whose outputs the port returns beside its logits: one array per name, each
#: stacked over the blocks by the scan (``(L, B, S, E)``).
LISTED = ("transformer.h.*.ln_1", "transformer.h.*.attn", "transformer.h.*.ln_2", "transformer.h.*.mlp")


def tokens(rng, dtype):
    """Two sequences of 6 token ids, all positions attended."""
    import numpy as np

    return {"input_ids": rng.integers(0, V, size=(2, 6)).astype(np.int64)}


def torch_model():
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    return GPT2LMHeadModel(GPT2Config(**CONFIG)).eval()


def equinox_model(*, tied=True, epsilon=1e-5):
    """The port in Equinox; ``tied=False`` plants a bug: the head its own leaf (``lm_head``), drawn at
    random, not the embedding; ``epsilon=1e-6`` the LayerNorm epsilon of Flax's default."""
    import equinox as eqx
    import jax
    import jax.numpy as jnp

    def dense(layer, x):  # an Equinox Linear on the last axis of any batch
        return x @ layer.weight.T + layer.bias

    def norm(layer, x):
        return jax.vmap(jax.vmap(layer))(x)

    def gelu(x):  # GPT-2's gelu_new, the tanh approximation
        return jax.nn.gelu(x, approximate=True)

    class Attention(eqx.Module):
        c_attn: eqx.nn.Linear
        c_proj: eqx.nn.Linear

        def __init__(self, key):
            a, b = jax.random.split(key)
            self.c_attn, self.c_proj = eqx.nn.Linear(E, 3 * E, key=a), eqx.nn.Linear(E, E, key=b)

        def __call__(self, x):
            b, s, _ = x.shape
            q, k, v = (t.reshape(b, s, H, E // H) for t in jnp.split(dense(self.c_attn, x), 3, axis=-1))
            scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / jnp.sqrt(jnp.asarray(E // H, x.dtype))
            scores = jnp.where(jnp.tril(jnp.ones((s, s), bool)), scores, jnp.finfo(x.dtype).min)
            out = jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(scores, -1), v).reshape(b, s, E)
            return dense(self.c_proj, out)

    class MLP(eqx.Module):
        c_fc: eqx.nn.Linear
        c_proj: eqx.nn.Linear

        def __init__(self, key):
            a, b = jax.random.split(key)
            self.c_fc, self.c_proj = eqx.nn.Linear(E, 4 * E, key=a), eqx.nn.Linear(4 * E, E, key=b)

        def __call__(self, x):
            return dense(self.c_proj, gelu(dense(self.c_fc, x)))

    class Block(eqx.Module):
        ln_1: eqx.nn.LayerNorm
        attn: Attention
        ln_2: eqx.nn.LayerNorm
        mlp: MLP

        def __init__(self, key):
            a, b = jax.random.split(key)
            self.ln_1, self.ln_2 = eqx.nn.LayerNorm(E, eps=epsilon), eqx.nn.LayerNorm(E, eps=epsilon)
            self.attn, self.mlp = Attention(a), MLP(b)

        def __call__(self, x):
            n1 = norm(self.ln_1, x)
            a = self.attn(n1)
            x = x + a
            n2 = norm(self.ln_2, x)
            m = self.mlp(n2)
            return x + m, {"ln_1": n1, "attn": a, "ln_2": n2, "mlp": m}

    class Transformer(eqx.Module):
        wte: eqx.nn.Embedding
        wpe: eqx.nn.Embedding
        h: Block  # every array stacked on a leading axis of L
        ln_f: eqx.nn.LayerNorm

        def __init__(self, key):
            a, b, c = jax.random.split(key, 3)
            self.wte, self.wpe = eqx.nn.Embedding(V, E, key=a), eqx.nn.Embedding(P, E, key=b)
            self.h = eqx.filter_vmap(Block)(jax.random.split(c, L))
            self.ln_f = eqx.nn.LayerNorm(E, eps=epsilon)

        def __call__(self, ids):
            x = self.wte.weight[ids] + self.wpe.weight[jnp.arange(ids.shape[1])][None]
            arrays, static = eqx.partition(self.h, eqx.is_array)

            @jax.checkpoint
            def step(x, layer):
                return eqx.combine(layer, static)(x)

            x, steps = jax.lax.scan(step, x, arrays)  # steps: each block's outputs, stacked
            return norm(self.ln_f, x), steps

    class LMHead(eqx.Module):
        transformer: Transformer
        lm_head: eqx.nn.Linear | None

        def __init__(self, key):
            a, b = jax.random.split(key)
            self.transformer = Transformer(a)
            self.lm_head = None if tied else eqx.nn.Linear(E, V, use_bias=False, key=b)

        def __call__(self, input_ids):
            x, steps = self.transformer(input_ids)
            head = self.transformer.wte.weight if self.lm_head is None else self.lm_head.weight
            return x @ head.T, {f"transformer.h.*.{k}": v for k, v in steps.items()}

    return LMHead(jax.random.key(0))


def make_port(name="gpt2-equinox", **bugs):
    return crosscheck.Port(
        name=name,
        torch=torch_model(),
        jax=equinox_model(**bugs),
        inputs=tokens,
        jax_call=lambda model, inputs: model(inputs["input_ids"]),
        output=lambda out: out.logits if hasattr(out, "logits") else out,
        jax_intermediates=LISTED,
        description="Hugging Face GPT-2 LM (3 layers) against an Equinox port: scanned blocks, tied head",
    )


#: The planted bugs: name -> (what it is, the module the verdict must name, how to make the port).
BUGS = {
    "untied_head": (
        "the port's head its own leaf, not the token embedding: PyTorch's tied head has no tensor of its "
        "own to fill it",
        "lm_head",
        dict(tied=False),
    ),
    "layer_norm_epsilon": (
        "the LayerNorm epsilon 1e-6 (Flax's default), not GPT-2's 1e-5",
        "transformer.h.0.ln_1",
        dict(epsilon=1e-6),
    ),
}


def __getattr__(name):  # the ports are built when asked for: importing this module imports no framework
    if name == "port":
        return make_port()
    if name in BUGS:
        return make_port(f"gpt2-equinox-{name.replace('_', '-')}", **BUGS[name][2])
    raise AttributeError(name)
