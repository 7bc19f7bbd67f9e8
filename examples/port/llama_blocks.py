"""Hugging Face Llama checked block by block: each PyTorch ``LlamaDecoderLayer`` of a ``LlamaForCausalLM``
against Flax's ``FlaxLlamaDecoderLayer``, on the inputs and cotangent the PyTorch model gives it
(``crosscheck.Blocks``).

Run from the repository root::

    crosscheck blocks --workload examples.port.llama_blocks:blocks --reference torch       # healthy
    crosscheck blocks --workload examples.port.llama_blocks:rms_norm_eps --reference torch # layers.1 differs
    crosscheck blocks --workload examples.port.llama_blocks:one_b --reference torch        # ~1B parameters
    crosscheck blocks --workload examples.port.llama_blocks:one_b_gelu --reference torch   # layers.1 differs

``blocks`` and the planted bug are tiny (3 layers, width 16, 4 query heads sharing 2 key/value heads:
grouped-query attention, Llama's own initialisation); ``one_b`` is TinyLlama's shape (22 layers, width
2048, 32 query heads over 4 key/value heads, SwiGLU width 5632, vocabulary 32000: 1.1B parameters),
random weights, one sequence of 32 tokens. The models are built when the attribute is asked for, and
each block is built alone (``torch_block``) from its recorded weights.

PyTorch's layer is called with what ``LlamaModel`` computes once for all layers: the rotary table
``position_embeddings=(cos, sin)`` (a tuple: recorded as the inputs ``position_embeddings[0]`` and
``[1]``), ``position_ids``, ``cache_position`` and the causal mask. Flax's layer computes its rotary
table and causal mask itself from ``position_ids`` and a padding mask of ones, so ``jax_inputs`` gives
it those; the recorded table reaches only the PyTorch side. (Flax's table is built with base 10000
whatever ``rope_theta`` says: a Llama 3 config, ``rope_theta=500000``, fails every block.)
"""

from __future__ import annotations

import crosscheck

#: The tiny config: three layers so that the planted bug sits between two healthy ones; grouped-query
#: attention (4 query heads, 2 key/value heads); Llama's own initialisation (std 0.02), under which the
#: hidden states stay small enough for the RMSNorm epsilon to matter.
CONFIG = dict(
    vocab_size=64,
    hidden_size=16,
    intermediate_size=24,
    num_hidden_layers=3,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=32,
    rms_norm_eps=1e-6,
    initializer_range=0.02,
    use_cache=False,
)
#: TinyLlama-1.1B's shape (as ``benchmarks/real_size.py``'s ``llama-1b``): 1.1B parameters.
ONE_B = dict(
    vocab_size=32000,
    hidden_size=2048,
    intermediate_size=5632,
    num_hidden_layers=22,
    num_attention_heads=32,
    num_key_value_heads=4,
    max_position_embeddings=2048,
    rms_norm_eps=1e-5,
    use_cache=False,
)
#: Sequence lengths: the tiny model's, and the 1B model's.
TOKENS = {"tiny": (2, 6), "one_b": (1, 32)}


def make_blocks(name="llama-blocks", *, config=CONFIG, size="tiny", bug_in=None, flax_config=None):
    """The blockwise check of a Llama of ``config``; ``bug_in``: the block (``model.layers.1``) whose
    Flax port is built with ``flax_config`` on top (a planted bug in that block only)."""
    from transformers import LlamaConfig

    torch_config = LlamaConfig(**config, attn_implementation="eager")
    batch, length = TOKENS[size]

    def model():
        import torch
        from transformers import LlamaForCausalLM

        torch.manual_seed(0)
        return LlamaForCausalLM(torch_config).eval()

    def tokens(rng, dtype):
        return {"input_ids": rng.integers(0, config["vocab_size"], size=(batch, length))}

    def torch_block(index, block):
        from transformers.models.llama.modeling_llama import LlamaDecoderLayer

        return LlamaDecoderLayer(torch_config, layer_idx=int(block.rsplit(".", 1)[1]))

    def jax_inputs(inputs):  # traced: shapes only
        import jax.numpy as jnp

        hidden, ids = inputs["hidden_states"], inputs["position_ids"]
        return {
            "hidden_states": hidden,
            "position_ids": ids,
            # Flax combines this padding mask with its own causal mask: nothing is padded.
            "attention_mask": jnp.ones((hidden.shape[0], ids.shape[-1]), dtype=jnp.int32),
        }

    def port(index, block, module):
        from transformers.models.llama.modeling_flax_llama import FlaxLlamaDecoderLayer

        extra = flax_config if block == bug_in else {}
        return dict(
            jax=FlaxLlamaDecoderLayer(LlamaConfig(**{**config, **(extra or {})})),
            jax_inputs=jax_inputs,
            jax_call=lambda m, inputs: m(
                inputs["hidden_states"],
                attention_mask=inputs["attention_mask"],
                position_ids=inputs["position_ids"],
                deterministic=True,
            )[0],
        )

    return crosscheck.Blocks(
        name=name,
        torch=model,
        inputs=tokens,
        blocks="model.layers.*",
        port=port,
        torch_block=torch_block,
        description="Hugging Face Llama, each LlamaDecoderLayer against FlaxLlamaDecoderLayer",
    )


#: The planted bugs: name -> (what it is, the module the verdict must name, how to make the blocks).
BUGS = {
    "rms_norm_eps": (
        "block layers.1's port has RMSNorm epsilon 1e-5, the PyTorch model 1e-6",
        "model.layers.1.input_layernorm",
        dict(bug_in="model.layers.1", flax_config={"rms_norm_eps": 1e-5}),
    ),
    "gelu": (
        "block layers.1's port gates its MLP with GELU, not SiLU (SwiGLU)",
        "model.layers.1.mlp",  # its activation is no module of the Flax port: named by the code around it
        dict(bug_in="model.layers.1", flax_config={"hidden_act": "gelu"}),
    ),
}


def __getattr__(name):  # built when asked for: importing this module imports no framework
    if name == "blocks":
        return make_blocks()
    if name == "one_b":
        return make_blocks("llama-1b-blocks", config=ONE_B, size="one_b")
    if name in BUGS:
        return make_blocks(f"llama-blocks-{name.replace('_', '-')}", **BUGS[name][2])
    if name == "one_b_gelu":  # a planted bug at 1B (its RMSNorm epsilon is already 1e-5: not that one)
        return make_blocks("llama-1b-blocks-gelu", config=ONE_B, size="one_b", **BUGS["gelu"][2])
    raise AttributeError(name)
