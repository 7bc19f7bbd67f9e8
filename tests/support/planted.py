"""Hand-written NumPy gradients of the stack, correct and with planted bugs, in the inputs' dtype.

Each is a plain function ``grad(weights, x)``, i.e. a valid crosscheck backend. Arithmetic stays in the
inputs' dtype, so the float32 ones round like a float32 framework would.
"""

from __future__ import annotations

import numpy as np


def _grad(weights, x, *, last_relu=True, mean=False, relu_at_zero=0.0, wrt_x=False):
    ys, masks, y = [x], [], x
    for k, w in enumerate(weights):
        z = y @ w
        mask = (z > 0) | ((z == 0) & (relu_at_zero == 1.0))
        if k == len(weights) - 1 and not last_relu:
            mask = np.ones_like(mask)
        y = np.where(mask, z, 0).astype(x.dtype)
        ys.append(y)
        masks.append(mask)
    g = (2 * y / (y.size if mean else 1)).astype(x.dtype)
    grads = np.empty_like(weights)
    for k in reversed(range(len(weights))):
        delta = np.where(masks[k], g, 0).astype(x.dtype)
        grads[k] = ys[k].T @ delta
        g = delta @ weights[k].T
    return g if wrt_x else grads


def correct(weights, x):
    return _grad(weights, x)


def no_last_relu(weights, x):
    return _grad(weights, x, last_relu=False)


def mean_not_sum(weights, x):
    return _grad(weights, x, mean=True)


def transposed(weights, x):
    return _grad(weights, x).transpose(0, 2, 1).copy()


def wrt_x(weights, x):
    g = _grad(weights, x, wrt_x=True)
    return g.reshape(weights.shape) if g.size == weights.size else g


def relu_derivative_one_at_zero(weights, x):
    return _grad(weights, x, relu_at_zero=1.0)


def one_nan(weights, x):
    grad = _grad(weights, x)
    grad[-1, 0, 0] = np.nan
    return grad


def layers_reversed(weights, x):
    return _grad(weights, x)[::-1].copy()


def float32_always(weights, x):
    return _grad(weights.astype(np.float32), x.astype(np.float32))


def off_at_largest(rel):
    """A correct gradient whose single largest entry is off by a relative ``rel``."""

    def grad(weights, x):
        g = _grad(weights, x)
        index = np.unravel_index(np.argmax(np.abs(g)), g.shape)
        g[index] = g[index] * (1 + rel)
        return g

    grad.__name__ = f"off_by_{rel:g}_at_largest"
    return grad


def off_at_ninth_largest(rel):
    """A correct gradient whose 9th largest entry (by magnitude) of the layer holding the largest is off
    by a relative ``rel``: not among the 8 largest a screen's spot check takes, and from d = 256 at
    ``rel = 2e-4`` (30 x that entry's tolerance) below what a direction of its layer can see."""

    def grad(weights, x):
        g = _grad(weights, x)
        layer = int(np.unravel_index(np.argmax(np.abs(g)), g.shape)[0])
        flat = np.argsort(np.abs(g[layer]).ravel(), kind="stable")[-9]
        index = (layer, *np.unravel_index(flat, g.shape[1:]))
        g[index] = g[index] * (1 + rel)
        return g

    grad.__name__ = f"off_by_{rel:g}_at_ninth_largest"
    return grad


#: ``off_at_ninth_largest(2e-4)`` under a name an import string can give (``planted:ninth_off_by_2e_4``).
ninth_off_by_2e_4 = off_at_ninth_largest(2e-4)


def activations(weights, x):
    """The forward activations ``y[1] .. y[L]`` in the inputs' dtype, in ``_grad``'s arithmetic: the
    pattern its gradient took."""
    out, y = [], x
    for w in weights:
        z = y @ w
        y = np.where(z > 0, z, 0).astype(x.dtype)
        out.append(y)
    return np.stack(out)


class Patterned:
    """A backend of ``grad`` that also shows its activations (``activations``), so that the judge can
    hold the reference at the ReLU pattern it took; ``shown`` may change what it shows."""

    def __init__(self, grad, shown=None):
        self.grad_fn, self.shown = grad, shown
        self.name = f"patterned_{grad.__name__}"

    def grad(self, weights, x):
        return self.grad_fn(weights, x)

    def activations(self, weights, x):
        found = activations(weights, x)
        return found if self.shown is None else self.shown(found)
