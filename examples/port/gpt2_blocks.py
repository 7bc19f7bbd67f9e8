"""Hugging Face GPT-2 checked block by block: each PyTorch ``GPT2Block`` of a ``GPT2LMHeadModel`` against
Flax's ``FlaxGPT2Block``, on the inputs and cotangent the PyTorch model gives it (``crosscheck.Blocks``).

Run from the repository root::

    crosscheck blocks --workload examples.port.gpt2_blocks:blocks --reference torch      # healthy
    crosscheck blocks --workload examples.port.gpt2_blocks:gelu_exact --reference torch  # block h.1 differs
    crosscheck blocks --workload examples.port.gpt2_blocks:small --reference torch       # GPT-2 small, 124M
    crosscheck blocks --workload examples.port.gpt2_blocks:small_gelu_exact --reference torch

``blocks`` and the planted bug are tiny (3 layers, width 8, drawn with std 0.5 as in ``gpt2``); ``small``
is GPT-2 small at its real config (random weights, one sequence of 32 tokens). The models are built when
the attribute is asked for, and a worker of a Dask cluster (``--scheduler``) builds its block alone
(``torch_block``), never the model.
"""

from __future__ import annotations

import crosscheck
from examples.port.gpt2 import CONFIG as TINY

#: The tiny config, with three blocks so that the planted bug sits between two healthy ones.
CONFIG = {**TINY, "n_layer": 3}
#: GPT-2 small at its real size (124M parameters), without dropout or cache.
SMALL = dict(
    n_layer=12,
    n_embd=768,
    n_head=12,
    vocab_size=50257,
    n_positions=1024,
    resid_pdrop=0.0,
    embd_pdrop=0.0,
    attn_pdrop=0.0,
    use_cache=False,
)
#: The square attention output kernel (Conv1D stores (in, out), Flax (out, in)): as for the whole port.
OVERRIDES = {"attn.c_proj.weight": "transpose"}
#: Sequence lengths: the tiny model's, and GPT-2 small's.
TOKENS = {"tiny": (2, 6), "small": (1, 32)}


def make_blocks(name="gpt2-blocks", *, config=CONFIG, size="tiny", bug_in=None, flax_config=None):
    """The blockwise check of a GPT-2 of ``config``; ``bug_in``: the block (``transformer.h.1``) whose
    Flax port is built with ``flax_config`` on top (a planted bug in that block only)."""
    from transformers import GPT2Config

    torch_config = GPT2Config(**config, attn_implementation="eager")
    batch, length = TOKENS[size]

    def model():
        import torch
        from transformers import GPT2LMHeadModel

        torch.manual_seed(0)
        return GPT2LMHeadModel(torch_config).eval()

    def tokens(rng, dtype):
        ids = rng.integers(0, config["vocab_size"], size=(batch, length))
        return {"input_ids": ids}

    def torch_block(index, block):
        from transformers.models.gpt2.modeling_gpt2 import GPT2Block

        return GPT2Block(torch_config, layer_idx=int(block.rsplit(".", 1)[1]))

    def port(index, block, module):
        from transformers.models.gpt2.modeling_flax_gpt2 import FlaxGPT2Block

        extra = flax_config if block == bug_in else {}
        return dict(
            jax=FlaxGPT2Block(GPT2Config(**config, **(extra or {}))),
            # The causal mask is the Flax block's own (the model-level mask PyTorch passes is not used).
            jax_inputs=lambda inputs: {"hidden_states": inputs["hidden_states"]},
            jax_call=lambda m, inputs: m(inputs["hidden_states"], deterministic=True),
            overrides=OVERRIDES,
        )

    return crosscheck.Blocks(
        name=name,
        torch=model,
        inputs=tokens,
        blocks="transformer.h.*",
        port=port,
        torch_block=torch_block,
        description="Hugging Face GPT-2, each GPT2Block against FlaxGPT2Block",
    )


#: The planted bugs: name -> (what it is, the module the verdict must name, how to make the blocks).
BUGS = {
    "gelu_exact": (
        "block h.1's port uses the exact GELU; GPT-2's gelu_new is the tanh approximation",
        "transformer.h.1.mlp.act",
        dict(bug_in="transformer.h.1", flax_config={"activation_function": "gelu"}),
    ),
    "layer_norm_epsilon": (
        "block h.2's port has Flax's default LayerNorm epsilon 1e-6, not GPT-2's 1e-5",
        "transformer.h.2.ln_1",
        dict(bug_in="transformer.h.2", flax_config={"layer_norm_epsilon": 1e-6}),
    ),
}


def __getattr__(name):  # built when asked for: importing this module imports no framework
    if name == "blocks":
        return make_blocks()
    if name == "small":
        return make_blocks("gpt2-small-blocks", config=SMALL, size="small")
    if name in BUGS:
        return make_blocks(f"gpt2-blocks-{name.replace('_', '-')}", **BUGS[name][2])
    if name.startswith("small_") and name.removeprefix("small_") in BUGS:  # a planted bug at real size
        bug = name.removeprefix("small_")
        return make_blocks(
            f"gpt2-small-blocks-{bug.replace('_', '-')}", config=SMALL, size="small", **BUGS[bug][2]
        )
    raise AttributeError(name)
