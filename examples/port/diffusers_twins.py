"""diffusers' ``UNet2DConditionModel`` and ``AutoencoderKL`` against the Flax twins diffusers ships
(``FlaxUNet2DConditionModel``, ``FlaxAutoencoderKL``), from tiny configs (no download), converted by
diffusers' own rules as the Port's ``convert=``; with planted bugs (``BUGS``).

The shipped Flax UNet differs from PyTorch's in two places: the transformer block's GroupNorm epsilon
(``FlaxTransformer2DModel``: 1e-5, PyTorch's ``Transformer2DModel``: 1e-6) and GEGLU's GELU (Flax: the
tanh approximation, PyTorch: the exact one). The healthy ``unet`` fixes both in its ``jax_call``, as a
user would: subclasses of the two shipped classes (``_diffusers_flax.ExactGEGLU``,
``Transformer2DEpsilon``) swapped in where diffusers' modules look them up, for the call only. Each
shipped difference alone is a planted bug (``unet_group_norm_epsilon``, ``unet_geglu_tanh``);
``unet_shipped`` is the shipped model as it is. Both sides take NCHW images and return NCHW.

Needs ``diffusers`` with its Flax classes (0.39 is the last release that ships them; the ``diffusers``
extra). Run from the repository root::

    crosscheck run --workload examples.port.diffusers_twins:unet --reference torch
    crosscheck run --workload examples.port.diffusers_twins:vae --reference torch
    crosscheck run --workload examples.port.diffusers_twins:unet_geglu_tanh --reference torch
"""

from __future__ import annotations

import importlib.util

from examples.port.planted import Planted

#: The UNet's config, both sides: 2 blocks (cross-attention, then plain), 32 and 64 channels (Flax's
#: GroupNorms have 32 groups, fixed), 8 heads, 8x8 latents of 4 channels, a text context of width 32.
UNET = dict(
    sample_size=8,
    in_channels=4,
    out_channels=4,
    down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
    up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
    block_out_channels=(32, 64),
    layers_per_block=1,
    attention_head_dim=8,
    cross_attention_dim=32,
)
#: The VAE's config, both sides: 2 blocks of 8 and 16 channels, GroupNorms of 4 groups, 4 latent
#: channels, 8x8 RGB images.
VAE = dict(
    in_channels=3,
    out_channels=3,
    down_block_types=("DownEncoderBlock2D", "DownEncoderBlock2D"),
    up_block_types=("UpDecoderBlock2D", "UpDecoderBlock2D"),
    block_out_channels=(8, 16),
    layers_per_block=1,
    latent_channels=4,
    norm_num_groups=4,
    sample_size=8,
)
BATCH, TOKENS = 2, 4
#: The two fixes of the healthy UNet (``_diffusers_flax.SWAPS``).
FIXES = ("exact_geglu", "transformer_epsilon")


def require():
    """Raises one clear error when diffusers, or its Flax classes (gone from 0.40), is not installed."""
    flax_classes = "diffusers.models.vae_flax"  # finding it imports diffusers, as the ports do anyway
    if importlib.util.find_spec("diffusers") is None or importlib.util.find_spec(flax_classes) is None:
        raise ModuleNotFoundError(
            "examples.port.diffusers_twins needs diffusers with its Flax classes (0.39 is the last release "
            "that ships them): pip install 'crosscheck-gradients[diffusers]'"
        )


#: Each pair: its PyTorch class, its shipped Flax twin, its config (both sides take the same).
PAIRS = {
    "unet": ("UNet2DConditionModel", "FlaxUNet2DConditionModel", UNET),
    "vae": ("AutoencoderKL", "FlaxAutoencoderKL", VAE),
}


def torch_model(kind: str):
    """``"unet"`` or ``"vae"``: the PyTorch model from its tiny config, diffusers' own init, eval mode."""
    require()
    import diffusers
    import torch

    torch_class, _, config = PAIRS[kind]
    torch.manual_seed(0)
    return getattr(diffusers, torch_class)(**config).eval()


def flax_model(kind: str):
    """The Flax twin diffusers ships for ``kind``, from the same config."""
    require()
    import diffusers

    _, flax_class, config = PAIRS[kind]
    return getattr(diffusers, flax_class)(**config)


def unet_inputs(rng, dtype):
    """Latents ``(2, 4, 8, 8)``, two integer timesteps, a text context ``(2, 4, 32)``."""
    import numpy as np

    return {
        "sample": rng.standard_normal((BATCH, 4, 8, 8)).astype(dtype),
        "timestep": np.array([10, 500], dtype=np.int32),
        "encoder_hidden_states": rng.standard_normal((BATCH, TOKENS, 32)).astype(dtype),
    }


def vae_inputs(rng, dtype):
    """RGB images ``(2, 3, 8, 8)``."""
    return {"sample": rng.standard_normal((BATCH, 3, 8, 8)).astype(dtype)}


def flax_unet_inputs(inputs):
    """Flax's UNet calls PyTorch's ``timestep`` ``timesteps``."""
    return {
        "sample": inputs["sample"],
        "timesteps": inputs["timestep"],
        "encoder_hidden_states": inputs["encoder_hidden_states"],
    }


def sample_of(module, inputs):
    """The output's ``sample`` (NCHW on both sides), for ``torch_call`` and ``jax_call``."""
    return module(**inputs).sample


def jax_call(swaps):
    """The Flax call with the shipped classes ``swaps`` replaced for its duration (its output's sample)."""

    def call(model, inputs):
        from examples.port._diffusers_flax import swapped

        with swapped(swaps):
            return model(**inputs).sample

    return call


def make_port(kind="unet", name=None, *, swaps=None, hw_swapped=""):
    """The pair ``kind`` (``"unet"``, ``"vae"``), converted by diffusers' rules; ``swaps``: the shipped
    classes replaced during the JAX call (default: the UNet's two fixes); ``hw_swapped``: a convolution
    whose kernel the conversion gets wrong."""
    require()
    import crosscheck
    from examples.port._diffusers_flax import diffusers_convert

    flax = flax_model(kind)
    swaps = (FIXES if kind == "unet" else ()) if swaps is None else swaps
    return crosscheck.Port(
        name=name or f"diffusers-{kind}",
        torch=torch_model(kind),
        jax=flax,
        inputs=unet_inputs if kind == "unet" else vae_inputs,
        jax_inputs=flax_unet_inputs if kind == "unet" else None,
        torch_call=sample_of,
        jax_call=jax_call(tuple(swaps)),
        convert=diffusers_convert(flax, hw_swapped),
        description=f"diffusers {kind}: PyTorch against its shipped Flax twin, diffusers' conversion",
    )


#: The planted bugs: name -> the bug, the module a verdict must name, make_port's keywords.
BUGS = {
    "unet_group_norm_epsilon": Planted(
        "as shipped: the Flax transformer's GroupNorm epsilon 1e-5 (PyTorch's 1e-6); GEGLU fixed",
        "down_blocks.0.attentions.0.norm",
        dict(kind="unet", swaps=("exact_geglu",)),
    ),
    "unet_geglu_tanh": Planted(
        "as shipped: the Flax GEGLU's tanh-approximated GELU (PyTorch's: exact); the epsilon fixed",
        "down_blocks.0.attentions.0.transformer_blocks.0.ff.net.0",
        dict(kind="unet", swaps=("transformer_epsilon",)),
    ),
    "unet_shipped": Planted(
        "the shipped Flax UNet as it is: both differences above, the epsilon first in execution order",
        "down_blocks.0.attentions.0.norm",
        dict(kind="unet", swaps=()),
    ),
    "vae_attention_scale": Planted(
        "the VAE attention's logits divided by d, not sqrt(d) (first used in the encoder's mid block)",
        "encoder.mid_block.attentions.0",
        dict(kind="vae", swaps=("attention_scale",)),
    ),
    "vae_upsample_bilinear": Planted(
        "the VAE decoder's upsampler resizes bilinear, PyTorch's `Upsample2D` nearest",
        "decoder.up_blocks.0.upsamplers.0",
        dict(kind="vae", swaps=("upsample_bilinear",)),
    ),
    "vae_kernel_hw_swapped": Planted(
        "the conversion transposes the decoder's `conv_in` kernel (3, 2, 1, 0): height and width swapped",
        "decoder.conv_in",
        dict(kind="vae", hw_swapped="decoder.conv_in.weight"),
    ),
}


def __getattr__(name):  # the ports are built when asked for: importing this module imports no framework
    if name in ("unet", "vae"):
        return make_port(name)
    if name in BUGS:
        return make_port(name=f"diffusers-{name}".replace("_", "-"), **BUGS[name].change)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
