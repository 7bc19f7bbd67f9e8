"""What the buggy and the fixed port share: the shapes, the NumPy reference and the original PyTorch model.

The model: ``h = gelu(x @ w1 + b1)``, ``y = h @ w2 + b2``, loss ``mean((y - target) ** 2)``, with the
exact GELU ``z * Phi(z)`` (``Phi`` the standard normal CDF), PyTorch's default.
"""

from __future__ import annotations

import math

import numpy as np

PARAMETERS = {"w1": (4, 8), "b1": (8,), "w2": (8, 1), "b2": (1,)}
INPUTS = {"x": (16, 4), "target": (16, 1)}


def reference_loss(params, inputs):
    """The loss in NumPy float64: the oracle differentiates this by finite differences."""
    from scipy.special import erf

    z = inputs["x"] @ params["w1"] + params["b1"]
    h = 0.5 * z * (1.0 + erf(z / math.sqrt(2.0)))
    y = h @ params["w2"] + params["b2"]
    return float(np.mean((y - inputs["target"]) ** 2))


def torch_loss(params, inputs):
    """The original PyTorch model (``F.gelu`` is the exact GELU by default)."""
    import torch.nn.functional as F

    h = F.gelu(inputs["x"] @ params["w1"] + params["b1"])
    y = h @ params["w2"] + params["b2"]
    return ((y - inputs["target"]) ** 2).mean()
