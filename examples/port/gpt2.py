"""Hugging Face's GPT-2, PyTorch against its own Flax port (``transformers`` 4.x ships both), with a tiny
random config and four classic porting bugs (``BUGS``).

Run from the repository root::

    crosscheck run --workload examples.port.gpt2:port --reference torch      # the healthy pair
    crosscheck run --workload examples.port.gpt2:layer_norm_epsilon --reference torch

Each side is built from a config; the Flax module's parameters come from the PyTorch model through
crosscheck's mapping (the square attention projections need one decision: ``OVERRIDES``).
"""

from __future__ import annotations

import crosscheck

#: The tiny config: 2 layers, width 8, 2 heads, 16 tokens, no dropout, no cache. Weights drawn with
#: std 0.5, not GPT-2's 0.02: at 0.02 every pre-activation is ~0.05, where the exact and the tanh GELU
#: differ by ~1e-9 (below float32 rounding: no check can see it); trained weights are O(1) there.
CONFIG = dict(
    n_layer=2,
    n_embd=8,
    n_head=2,
    vocab_size=16,
    n_positions=8,
    resid_pdrop=0.0,
    embd_pdrop=0.0,
    attn_pdrop=0.0,
    use_cache=False,
    initializer_range=0.5,
)
#: ``h.*.attn.c_proj.weight`` is square (8, 8): as it is and transposed both fit; GPT-2's Conv1D
#: stores (in, out) and Flax's (out, in), so it is transposed like every other kernel.
OVERRIDES = {"h.*.attn.c_proj.weight": "transpose"}


def tokens(rng, dtype):
    """Two sequences of 6 token ids, all positions attended."""
    import numpy as np

    ids = rng.integers(0, CONFIG["vocab_size"], size=(2, 6)).astype(np.int32)
    return {
        "input_ids": ids,
        "attention_mask": np.ones_like(ids),
        "position_ids": np.tile(np.arange(6, dtype=np.int32), (2, 1)),
    }


def make_port(name="gpt2", *, torch_config=None, flax_config=None, overrides=None):
    import torch
    from transformers import GPT2Config, GPT2Model
    from transformers.models.gpt2.modeling_flax_gpt2 import FlaxGPT2Module

    torch.manual_seed(0)
    original = GPT2Model(GPT2Config(**CONFIG, **(torch_config or {}), attn_implementation="eager")).eval()
    port = FlaxGPT2Module(GPT2Config(**CONFIG, **(flax_config or {})))
    return crosscheck.Port(
        name=name,
        torch=original,
        jax=port,
        inputs=tokens,
        jax_call=lambda module, inputs: module(**inputs, deterministic=True),
        overrides={**OVERRIDES, **(overrides or {})},
        description="Hugging Face GPT-2 (2 layers, width 8): PyTorch against its Flax port",
    )


#: The planted bugs: name -> (what it is, the module the verdict must name, how to make the port).
BUGS = {
    "layer_norm_epsilon": (
        "the port's LayerNorm epsilon is Flax's default 1e-6, not GPT-2's 1e-5",
        "h.0.ln_1",
        dict(flax_config={"layer_norm_epsilon": 1e-6}),
    ),
    "gelu_exact": (
        "the port's GELU is the exact one; GPT-2's gelu_new is the tanh approximation",
        "h.0.mlp.act",
        dict(flax_config={"activation_function": "gelu"}),
    ),
    "attention_scale": (
        "the original scales attention by 1/(layer + 1) (scale_attn_by_inverse_layer_idx); the Flax "
        "port ignores the option",
        "h.1.attn",
        dict(torch_config={"scale_attn_by_inverse_layer_idx": True}),
    ),
    "kernel_not_transposed": (
        "the square attention output kernel of layer 0 copied without its transpose",
        "h.0.attn.c_proj",
        dict(overrides={"h.0.attn.c_proj.weight": "identity"}),
    ),
}


def __getattr__(name):  # the ports are built when asked for: importing this module imports no framework
    if name == "port":
        return make_port()
    if name in BUGS:
        return make_port(f"gpt2-{name.replace('_', '-')}", **BUGS[name][2])
    if name == "train" or name.startswith("train_"):
        return make_train(name.removeprefix("train").removeprefix("_"))
    raise AttributeError(name)


def make_train(bug=""):
    """The port trained with AdamW on both sides (``examples.port.optimizers``): ``bug`` names an
    optimizer bug planted in the optax side (``optimizers.BUGS``, a resumed state's ``STATE_BUGS``, a
    warmup's ``SCHEDULE_BUGS``) or a model bug of the port (``BUGS``, with the healthy optimizer); "" is
    the healthy pair, ``resume`` and ``warmup`` the healthy pairs that resume a run or warm up; ``sgd``
    the pair with SGD and momentum, and ``optimizers.SGD_BUGS`` its planted bugs."""
    from examples.port import optimizers

    name = "gpt2-train" + (f"-{bug.replace('_', '-')}" if bug else "")
    if bug == "sgd" or bug in optimizers.SGD_BUGS:
        return optimizers.sgd(make_port(), bug=None if bug == "sgd" else bug, name=name)
    if bug in ("resume", "warmup"):  # the healthy pairs that resume a run, or warm up
        return optimizers.train(make_port(), name=name, **{bug: True})
    planted = {**optimizers.BUGS, **optimizers.STATE_BUGS, **optimizers.SCHEDULE_BUGS}
    if bug and bug not in planted and bug not in BUGS:
        raise AttributeError(f"train_{bug}")
    port = make_port(f"gpt2-{bug.replace('_', '-')}", **BUGS[bug][2]) if bug in BUGS else make_port()
    return optimizers.train(port, bug=bug if bug in planted else None, name=name)
