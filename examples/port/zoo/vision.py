"""The zoo's vision, vision-and-text and audio models."""

from __future__ import annotations

from . import inputs as io
from .spec import QUIET, STD, Arch, randomize_batch_norms

#: Two layers, width 8, two heads of 4, 8x8 images in 4x4 patches, no dropout.
VIT = dict(
    image_size=io.IMAGE,
    patch_size=4,
    num_channels=3,
    hidden_size=8,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=16,
    initializer_range=STD,
    hidden_dropout_prob=0.0,
    attention_probs_dropout_prob=0.0,
)
CONVNET = dict(num_channels=3, embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1])
CLIP_TEXT = dict(
    vocab_size=16,
    hidden_size=8,
    intermediate_size=16,
    num_hidden_layers=2,
    num_attention_heads=2,
    max_position_embeddings=16,
    projection_dim=8,
    initializer_range=STD,
)
CLIP_VISION = {**VIT, "projection_dim": 8}
del CLIP_VISION["hidden_dropout_prob"], CLIP_VISION["attention_probs_dropout_prob"]


def _cls_token_off_zero(model) -> None:
    """BEiT's ``cls_token`` as a trained model has it, not its zero init (ViT draws it from the
    initializer already). With BEiT's relative position bias nothing is added to the zero token, so its
    row enters a LayerNorm of epsilon 1e-12 as an exact zero, where the loss bends on the scale 1e-6:
    no finite difference of a float64 loss can judge that point (`docs/measurements/zoo.md`)."""
    import torch

    generator = torch.Generator().manual_seed(1)
    model.embeddings.cls_token.copy_(STD * torch.randn(model.embeddings.cls_token.shape, generator=generator))


ARCHS = [
    Arch("vit", "vision transformer", "ViT", "vit", VIT, io.images, jax_inputs=io.channels_last),
    Arch(
        "beit",
        "vision transformer",
        "Beit",
        "beit",
        {**VIT, "use_relative_position_bias": True, "layer_scale_init_value": 0.5},
        io.images,
        jax_inputs=io.channels_last,
        prepare=lambda model: _cls_token_off_zero(model),
    ),
    Arch(
        "clip",
        "CLIP (text and vision)",
        "CLIP",
        "clip",
        dict(text_config=CLIP_TEXT, vision_config=CLIP_VISION, projection_dim=8, initializer_factor=1.0),
        io.text_and_images(16),
        jax_inputs=io.channels_last,
    ),
    Arch(
        "resnet",
        "convolution + BatchNorm",
        "ResNet",
        "resnet",
        {**CONVNET, "layer_type": "basic"},
        io.images,
        jax_inputs=io.channels_last,
        eager=False,
        prepare=randomize_batch_norms,
    ),
    Arch(
        "regnet",
        "convolution + BatchNorm",
        "RegNet",
        "regnet",
        {**CONVNET, "groups_width": 8, "layer_type": "y"},
        io.images,
        jax_inputs=io.channels_last,
        eager=False,
        prepare=randomize_batch_norms,
    ),
    Arch(
        "wav2vec2",
        "audio, weight norm",
        "Wav2Vec2",
        "wav2vec2",
        dict(
            hidden_size=8,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=16,
            conv_dim=(8, 8),
            conv_stride=(4, 2),
            conv_kernel=(8, 4),
            num_conv_pos_embeddings=4,
            num_conv_pos_embedding_groups=2,
            do_stable_layer_norm=True,
            feat_extract_norm="layer",
            initializer_range=STD,
            feat_proj_dropout=0.0,
            activation_dropout=0.0,
            layerdrop=0.0,
            final_dropout=0.0,
            **{k: v for k, v in QUIET.items() if k != "use_cache"},
        ),
        io.audio,
        # The vector a training run puts at masked time steps (SpecAugment): inference never uses it.
        unused=("masked_spec_embed",),
    ),
]
