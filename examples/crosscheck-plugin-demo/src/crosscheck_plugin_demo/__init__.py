"""A third-party crosscheck backend: the ReLU stack's gradient by hand in NumPy, in the inputs' dtype.

Installing this package registers it under the ``crosscheck.backends`` entry-point group as ``demo``.
"""

from __future__ import annotations

from importlib import metadata

import numpy as np


class DemoBackend:
    """``grad(weights, x)``: forward pass, then backward pass, ``loss = sum(relu-stack(x) ** 2)``."""

    name = "demo"

    def grad(self, weights: np.ndarray, x: np.ndarray) -> np.ndarray:
        ys, y = [x], x
        for w in weights:
            y = np.maximum(y @ w, 0)
            ys.append(y)
        g = 2 * y
        grads = np.empty_like(weights)
        for k in reversed(range(len(weights))):
            delta = g * (ys[k + 1] > 0)  # ReLU's derivative at 0 is 0, as in jax.nn.relu
            grads[k] = ys[k].T @ delta
            g = delta @ weights[k].T
        return grads

    def info(self) -> dict[str, str]:
        return {
            "framework": "numpy (crosscheck-plugin-demo)",
            "version": metadata.version("crosscheck-plugin-demo"),
            "device": "cpu",
        }
