"""The original of ``examples.port.custom_op``: an RMSNorm with its backward written by hand."""

from __future__ import annotations

import torch
from torch import nn


class RMSNormFunction(torch.autograd.Function):
    """``y = x * r * w``, ``r = 1 / sqrt(mean(x^2) + eps)`` over the last axis, and its backward:
    ``dx = r * (g*w - x^ * mean(g*w * x^))`` with ``x^ = x * r``, ``dw = sum(g * x^)`` over the rest."""

    @staticmethod
    def forward(ctx, x, weight, eps):
        r = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
        ctx.save_for_backward(x, weight, r)
        return x * r * weight

    @staticmethod
    def backward(ctx, grad):
        x, weight, r = ctx.saved_tensors
        x_hat = x * r
        g_hat = grad * weight
        dx = r * (g_hat - x_hat * (g_hat * x_hat).mean(-1, keepdim=True))
        dw = (grad * x_hat).reshape(-1, x.shape[-1]).sum(0)
        return dx, dw, None


class FusedRMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return RMSNormFunction.apply(x, self.weight, self.eps)


class TorchNet(nn.Module):
    """``fc1`` -> ``norm`` (the fused RMSNorm) -> ``act`` (exact GELU) -> ``fc2``."""

    def __init__(self, d_in: int, hidden: int, d_out: int, eps: float) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d_in, hidden)
        self.norm = FusedRMSNorm(hidden, eps)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, d_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.norm(self.fc1(x))))
