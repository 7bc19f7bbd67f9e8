"""The mini UNet of ``examples.port.unet``, ported to Flax linen (NHWC), with its planted bugs as
fields."""

from __future__ import annotations

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp


class Attention(nn.Module):
    """Self-attention over the pixels; ``scale="1/C"`` plants the scale bug."""

    groups: int
    epsilon: float
    scale: str = "1/sqrt(C)"

    @nn.compact
    def __call__(self, x):
        b, h, w, c = x.shape
        tokens = nn.GroupNorm(self.groups, epsilon=self.epsilon, name="norm")(x).reshape(b, h * w, c)
        q, k, v = (nn.Dense(c, name=name)(tokens) for name in ("q", "k", "v"))
        scale = 1 / c if self.scale == "1/C" else c**-0.5
        weights = jax.nn.softmax(q @ k.transpose(0, 2, 1) * scale, axis=-1)
        out = nn.Dense(c, name="proj")(weights @ v)
        return x + out.reshape(b, h, w, c)


class Upsample(nn.Module):
    """Upsampling by 2 (``method``: ``"nearest"``, PyTorch's; ``"bilinear"`` plants a bug), a conv."""

    features: int
    method: str = "nearest"

    @nn.compact
    def __call__(self, x):
        b, h, w, c = x.shape
        x = jax.image.resize(x, (b, 2 * h, 2 * w, c), self.method)
        return nn.Conv(self.features, (3, 3), padding=((1, 1), (1, 1)), name="conv")(x)


class TorchBatchNorm(nn.Module):
    """BatchNorm as PyTorch's ``BatchNorm2d`` computes it in both modes, Flax's ``momentum`` convention
    (the share of the old statistics kept): in training mode the running variance takes the unbiased
    batch variance (``n / (n - 1)``), where ``nn.BatchNorm`` takes the biased one. A user's own fix."""

    momentum: float = 0.9
    epsilon: float = 1e-5

    @nn.compact
    def __call__(self, x, *, use_running_average: bool):
        c = x.shape[-1]
        scale = self.param("scale", nn.initializers.ones, (c,))
        bias = self.param("bias", nn.initializers.zeros, (c,))
        ra_mean = self.variable("batch_stats", "mean", jnp.zeros, (c,))
        ra_var = self.variable("batch_stats", "var", jnp.ones, (c,))
        if use_running_average:
            mean, var = ra_mean.value, ra_var.value
        else:
            mean, var = x.mean(axis=(0, 1, 2)), x.var(axis=(0, 1, 2))
            if not self.is_initializing():
                n = x.size // c
                ra_mean.value = self.momentum * ra_mean.value + (1 - self.momentum) * mean
                ra_var.value = self.momentum * ra_var.value + (1 - self.momentum) * var * n / (n - 1)
        return (x - mean) * jax.lax.rsqrt(var + self.epsilon) * scale + bias


class FlaxUNet(nn.Module):
    """The port. Planted bugs: ``gn_epsilon`` (Flax's default 1e-6), ``attention_scale="1/C"``,
    ``upsample="bilinear"``, ``momentum=0.1`` (PyTorch's convention); ``batch_norm``: ``"flax"``
    (``nn.BatchNorm``), ``"torch"`` (``TorchBatchNorm``), ``"running"`` (``nn.BatchNorm`` on its running
    statistics even in training mode: a bug)."""

    c_in: int
    width: int
    groups: int
    epsilon: float
    gn_epsilon: float | None = None
    attention_scale: str = "1/sqrt(C)"
    upsample: str = "nearest"
    batch_norm: str = "flax"
    momentum: float = 0.9

    @nn.compact
    def __call__(self, x, train: bool = False):
        conv = functools.partial(nn.Conv, kernel_size=(3, 3), padding=((1, 1), (1, 1)))
        gn_eps = self.epsilon if self.gn_epsilon is None else self.gn_epsilon
        if self.batch_norm == "torch":
            bn = TorchBatchNorm(self.momentum, self.epsilon, name="bn")
        else:
            bn = nn.BatchNorm(momentum=self.momentum, epsilon=self.epsilon, name="bn")
        running = not train or self.batch_norm == "running"
        skip = nn.silu(bn(conv(self.width, name="conv_in")(x), use_running_average=running))
        h = conv(2 * self.width, strides=(2, 2), name="down")(skip)
        h = nn.silu(nn.GroupNorm(self.groups, epsilon=gn_eps, name="gn1")(h))
        h = Attention(self.groups, gn_eps, self.attention_scale, name="attn")(h)
        h = Upsample(self.width, self.upsample, name="up")(h)
        h = jnp.concatenate([h, skip], axis=-1)
        h = nn.silu(nn.GroupNorm(self.groups, epsilon=gn_eps, name="gn2")(h))
        return conv(self.c_in, name="conv_out")(h)
