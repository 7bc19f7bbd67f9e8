"""The Flax side of ``examples.port.diffusers_twins``: diffusers' own conversion as a ``convert=``, the
two fixes that make the shipped Flax UNet compute what PyTorch's does, and the planted bugs, each a
subclass of a shipped class swapped in for the duration of the JAX call (``swapped``)."""

from __future__ import annotations

import contextlib
import math

import flax.linen as nn
import jax
import jax.numpy as jnp
from diffusers.models import attention_flax, vae_flax
from diffusers.models.modeling_flax_pytorch_utils import rename_key, rename_key_and_reshape_tensor
from diffusers.models.unets import unet_2d_blocks_flax
from flax.traverse_util import flatten_dict, unflatten_dict


def diffusers_convert(flax_model, hw_swapped: str = ""):
    """diffusers' own conversion rules (``convert_pytorch_state_dict_to_flax``'s loop over its public
    ``rename_key`` and ``rename_key_and_reshape_tensor``), as a ``Port(convert=...)``: traceable, so the
    state dict's arrays may be JAX's. diffusers' function itself calls ``.numpy()`` on tensors.
    ``hw_swapped``: the PyTorch name of a convolution whose kernel is converted ``(3, 2, 1, 0)``, its
    height and width swapped (a planted bug of a hand-written conversion)."""
    shapes = flatten_dict(jax.eval_shape(flax_model.init_weights, jax.random.PRNGKey(0)))

    def convert(state_dict):
        flat = {}
        for name, tensor in state_dict.items():
            key = tuple(rename_key(name).split("."))
            flax_key, flax_tensor = rename_key_and_reshape_tensor(key, tensor, shapes)
            flat[flax_key] = tensor.transpose(3, 2, 1, 0) if name == hw_swapped else flax_tensor
        return {"params": unflatten_dict(flat)}

    return convert


class ExactGEGLU(attention_flax.FlaxGEGLU):
    """diffusers' Flax GEGLU with the exact GELU, as PyTorch's ``GEGLU`` (the shipped one: tanh)."""

    def __call__(self, hidden_states, deterministic=True):
        linear, gate = jnp.split(self.proj(hidden_states), 2, axis=2)
        return self.dropout_layer(linear * nn.gelu(gate, approximate=False), deterministic=deterministic)


class Transformer2DEpsilon(attention_flax.FlaxTransformer2DModel):
    """diffusers' Flax ``Transformer2DModel`` with its GroupNorm's epsilon 1e-6, as PyTorch's (the
    shipped one: 1e-5)."""

    def setup(self):  # the shipped setup (diffusers 0.31 to 0.39), but for the epsilon
        self.norm = nn.GroupNorm(num_groups=32, epsilon=1e-6)
        inner_dim = self.n_heads * self.d_head
        self.proj_in, self.proj_out = (self._projection(inner_dim) for _ in range(2))
        self.transformer_blocks = [
            attention_flax.FlaxBasicTransformerBlock(
                inner_dim,
                self.n_heads,
                self.d_head,
                dropout=self.dropout,
                only_cross_attention=self.only_cross_attention,
                dtype=self.dtype,
                use_memory_efficient_attention=self.use_memory_efficient_attention,
                split_head_dim=self.split_head_dim,
            )
            for _ in range(self.depth)
        ]
        self.dropout_layer = nn.Dropout(rate=self.dropout)

    def _projection(self, inner_dim):
        if self.use_linear_projection:
            return nn.Dense(inner_dim, dtype=self.dtype)
        return nn.Conv(inner_dim, kernel_size=(1, 1), strides=(1, 1), padding="VALID", dtype=self.dtype)


class AttentionScaleOnce(vae_flax.FlaxAttentionBlock):
    """The VAE's attention with its scale ``1/sqrt(d)`` applied to the query and again to the key (the
    shipped block applies ``d ** -1/4`` to each): a planted bug, the logits divided by ``d``."""

    def __call__(self, hidden_states):
        residual = hidden_states
        batch, height, width, channels = hidden_states.shape
        hidden_states = self.group_norm(hidden_states).reshape((batch, height * width, channels))
        query, key, value = (
            self.transpose_for_scores(p(hidden_states)) for p in (self.query, self.key, self.value)
        )
        scale = 1 / math.sqrt(self.channels / self.num_heads)
        weights = nn.softmax(jnp.einsum("...qc,...kc->...qk", query * scale, key * scale), axis=-1)
        hidden_states = jnp.einsum("...kc,...qk->...qc", value, weights)
        hidden_states = jnp.transpose(hidden_states, (0, 2, 1, 3)).reshape((batch, height * width, channels))
        hidden_states = self.proj_attn(hidden_states).reshape((batch, height, width, channels))
        return hidden_states + residual


class UpsampleBilinear(vae_flax.FlaxUpsample2D):
    """The VAE's upsampler with a bilinear resize (PyTorch's ``Upsample2D``: nearest): a planted bug."""

    def __call__(self, hidden_states):
        batch, height, width, channels = hidden_states.shape
        hidden_states = jax.image.resize(hidden_states, (batch, 2 * height, 2 * width, channels), "bilinear")
        return self.conv(hidden_states)


#: What each swap replaces: name -> (the module holding the name, the name, the class swapped in).
SWAPS = {
    "exact_geglu": (attention_flax, "FlaxGEGLU", ExactGEGLU),
    "transformer_epsilon": (unet_2d_blocks_flax, "FlaxTransformer2DModel", Transformer2DEpsilon),
    "attention_scale": (vae_flax, "FlaxAttentionBlock", AttentionScaleOnce),
    "upsample_bilinear": (vae_flax, "FlaxUpsample2D", UpsampleBilinear),
}


@contextlib.contextmanager
def swapped(names):
    """The shipped classes ``names`` (keys of ``SWAPS``) replaced where diffusers' Flax modules look them
    up, while the JAX call runs (its ``setup`` builds the sub-modules then), and restored after."""
    saved = [(module, attr, getattr(module, attr)) for module, attr, _ in (SWAPS[n] for n in names)]
    try:
        for name in names:
            module, attr, cls = SWAPS[name]
            setattr(module, attr, cls)
        yield
    finally:
        for module, attr, original in saved:
            setattr(module, attr, original)
