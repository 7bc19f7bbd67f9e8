"""The mini UNet of ``examples.port.unet``, in PyTorch (NCHW)."""

from __future__ import annotations

import torch
from torch import nn


class Attention(nn.Module):
    """Self-attention over the pixels: GroupNorm, then one head on the ``(B, H*W, C)`` tokens, a
    residual."""

    def __init__(self, channels: int, groups: int, eps: float) -> None:
        super().__init__()
        self.norm = nn.GroupNorm(groups, channels, eps=eps)
        self.q, self.k, self.v = (nn.Linear(channels, channels) for _ in range(3))
        self.proj = nn.Linear(channels, channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c, h, w = x.shape
        tokens = self.norm(x).flatten(2).transpose(1, 2)  # (B, H*W, C)
        q, k, v = self.q(tokens), self.k(tokens), self.v(tokens)
        weights = torch.softmax(q @ k.transpose(1, 2) / c**0.5, dim=-1)
        out = self.proj(weights @ v)
        return x + out.transpose(1, 2).reshape(b, c, h, w)


class Upsample(nn.Module):
    """Nearest upsampling by 2, then a 3x3 convolution."""

    def __init__(self, channels: int, features: int) -> None:
        super().__init__()
        self.resize = nn.Upsample(scale_factor=2, mode="nearest")
        self.conv = nn.Conv2d(channels, features, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(self.resize(x))


class TorchUNet(nn.Module):
    """conv, BatchNorm, SiLU, a strided convolution down, GroupNorm, attention, up, a skip, GroupNorm,
    conv (``examples.port.unet``)."""

    def __init__(self, c_in: int, width: int, groups: int, eps: float) -> None:
        super().__init__()
        self.conv_in = nn.Conv2d(c_in, width, 3, padding=1)
        self.bn = nn.BatchNorm2d(width, eps=eps)
        self.act = nn.SiLU()
        self.down = nn.Conv2d(width, 2 * width, 3, stride=2, padding=1)
        self.gn1 = nn.GroupNorm(groups, 2 * width, eps=eps)
        self.attn = Attention(2 * width, groups, eps)
        self.up = Upsample(2 * width, width)
        self.gn2 = nn.GroupNorm(groups, 2 * width, eps=eps)
        self.conv_out = nn.Conv2d(2 * width, c_in, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skip = self.act(self.bn(self.conv_in(x)))
        h = self.act(self.gn1(self.down(skip)))
        h = self.up(self.attn(h))
        h = self.act(self.gn2(torch.cat([h, skip], dim=1)))
        return self.conv_out(h)
