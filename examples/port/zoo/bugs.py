"""Classic porting bugs planted in the zoo: each changes one thing on one side of one architecture, and
names the module the verdict must locate. ``examples.port.zoo:<arch>_<kind>`` builds it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from . import inputs as io


@dataclass(frozen=True)
class Bug:
    arch: str
    kind: str
    what: str
    module: str
    change: dict[str, Any]
    #: The dtypes in which the bug changes the port's function (a module pinned to float32 does not in
    #: a float32 check).
    seen_in: tuple[str, ...] = ("float32", "float64")
    #: Whether the bug changes the forward pass (every bug planted here does): a bug only in the
    #: backward pass (a custom VJP, a misplaced ``stop_gradient``) is invisible to the forward check
    #: (``--quantity output``), which ``benchmarks/zoo.py`` says instead of counting it as missed.
    in_forward: bool = True


def _batch_norm_epsilon(model) -> None:
    import torch

    for module in model.modules():
        if isinstance(module, torch.nn.BatchNorm2d):
            module.eps = 1e-3


def _pinned_to_float32(name: str):
    """A Flax call in which the sub-module ``name`` computes in float32 whatever the model's dtype: its
    input and its output cast to float32, as a module written with ``dtype=jnp.float32`` does. Harmless
    in a float32 check; in a float64 check, that module's output keeps float32's rounding."""

    def call(module, inputs):
        import flax.linen as nn
        import jax
        import jax.numpy as jnp

        def to32(tree):
            return jax.tree_util.tree_map(lambda a: a.astype(jnp.float32) if hasattr(a, "dtype") else a, tree)

        def pin(next_fun, args, kwargs, context):
            if context.method_name == "__call__" and context.module.name == name:
                return to32(next_fun(*to32(args), **kwargs))
            return next_fun(*args, **kwargs)

        with nn.intercept_methods(pin):  # flax's public method interceptor
            return module(**inputs, deterministic=True)

    return call


def _bart_positions(inputs):
    return io.with_positions(inputs, start=2, decoder_start=2)


#: The activation runs inside the intermediate module on both sides (Flax calls it inline), so the
#: verdict names the intermediate: its input agrees, its output differs.
_ACT = "encoder.layer.0.intermediate"

BUGS: dict[str, Bug] = {
    f"{bug.arch}_{bug.kind}": bug
    for bug in (
        Bug(
            "bert",
            "layer_norm_epsilon",
            "the port's LayerNorm epsilon is PyTorch's default 1e-5, not BERT's 1e-12",
            "embeddings.LayerNorm",
            dict(flax_config={"layer_norm_eps": 1e-5}),
        ),
        Bug(
            "mistral",
            "rms_norm_epsilon",
            "the port's RMSNorm epsilon is 1e-5, not the model's 1e-6",
            "layers.0.input_layernorm",
            dict(flax_config={"rms_norm_eps": 1e-5}),
        ),
        Bug(
            "mistral",
            "no_window",
            "no sliding window (`sliding_window=None`, which Mistral's config allows) on both sides: "
            "transformers 4.57's Flax Mistral builds its mask with `triu(causal, k=-(None or 0))`, the "
            "diagonal only: each token attends to itself alone (a bug of the library's Flax port)",
            "layers.0.self_attn",
            dict(torch_config={"sliding_window": None}, flax_config={"sliding_window": None}),
        ),
        Bug(
            "t5",
            "layer_norm_epsilon",
            "the port's T5 LayerNorm (RMS) epsilon is 1e-5, not T5's 1e-6",
            "encoder.block.0.layer.0.layer_norm",
            dict(flax_config={"layer_norm_epsilon": 1e-5}),
        ),
        Bug(
            "roberta",
            "gelu_tanh",
            "the port's GELU is the tanh approximation; RoBERTa's is the exact one",
            _ACT,
            dict(flax_config={"hidden_act": "gelu_new"}),
        ),
        Bug(
            "vit",
            "gelu_tanh",
            "the port's GELU is the tanh approximation; ViT's is the exact one",
            _ACT,
            dict(flax_config={"hidden_act": "gelu_new"}),
        ),
        Bug(
            "electra",
            "kernel_not_transposed",
            "the square query kernel of layer 0 copied without its transpose",
            "encoder.layer.0.attention.self.query",
            dict(overrides={"encoder.layer.0.attention.self.query.weight": "identity"}),
        ),
        Bug(
            "gpt2",
            "attention_scale",
            "the original scales attention by 1/(layer + 1) (scale_attn_by_inverse_layer_idx); the Flax port "
            "ignores the option",
            "h.1.attn",
            dict(torch_config={"scale_attn_by_inverse_layer_idx": True}),
        ),
        Bug(
            "llama",
            "rotary_base",
            "the original's rotary base is Llama 3's 500000; the Flax port hard-codes 10000",
            "layers.0.self_attn",
            dict(torch_config={"rope_theta": 500000.0}),
        ),
        Bug(
            "resnet",
            "batch_norm_epsilon",
            "the original's BatchNorm epsilon is 1e-3; the Flax port hard-codes 1e-5",
            "embedder.embedder.normalization",
            dict(prepare=_batch_norm_epsilon),
        ),
        Bug(
            "gpt2",
            "float32_sub_module",
            "the port's final LayerNorm computes in float32 whatever the model's dtype (`dtype=jnp.float32` "
            "written into the module): seen only in a float64 check",
            "ln_f",
            dict(jax_call=_pinned_to_float32("ln_f")),
            seen_in=("float64",),
        ),
        Bug(
            "bart",
            "position_offset",
            "the port is given positions that already include BART's offset of 2, which its embedding adds "
            "again: the port's own code (its call), so the verdict names the top module's code before "
            "`encoder.embed_positions` (module '')",
            "",
            dict(jax_inputs=_bart_positions),
        ),
    )
}
