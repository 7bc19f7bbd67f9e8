"""Hand-written NumPy Hessian-vector products of the stack (forward over reverse), correct and with
planted bugs, in the inputs' dtype. Each is a backend object with ``hvp(weights, x, v)``."""

from __future__ import annotations

import numpy as np


def _hvp(
    weights,
    x,
    v,
    *,
    drop_y_dot=False,
    drop_v_back=False,
    no_mask_dot=False,
    roll_v=False,
    off_at_largest=0.0,
    float32_scale=1.0,
):
    if roll_v:
        v = np.roll(v, 1, axis=0)  # v on the wrong layer
    ys, y_dots, masks = [x], [np.zeros_like(x)], []
    y, y_dot = x, np.zeros_like(x)
    for w, vk in zip(weights, v, strict=True):
        z, z_dot = y @ w, y_dot @ w + y @ vk
        mask = z > 0
        y, y_dot = np.where(mask, z, 0).astype(x.dtype), np.where(mask, z_dot, 0).astype(x.dtype)
        ys.append(y)
        y_dots.append(y_dot)
        masks.append(mask)
    g, g_dot = 2 * y, 2 * y_dot
    out = np.empty_like(weights)
    for k in reversed(range(len(weights))):
        delta = np.where(masks[k], g, 0).astype(x.dtype)
        delta_dot = g_dot if no_mask_dot else np.where(masks[k], g_dot, 0).astype(x.dtype)
        out[k] = ys[k].T @ delta_dot + (0 if drop_y_dot else y_dots[k].T @ delta)
        g_dot = delta_dot @ weights[k].T + (0 if drop_v_back else delta @ v[k].T)
        g = delta @ weights[k].T
    if x.dtype == np.float32:  # wrong in float32 only: its float64 re-run is right
        out *= float32_scale
    if off_at_largest:
        index = np.unravel_index(np.argmax(np.abs(out)), out.shape)
        out[index] *= 1 + off_at_largest
    return out


class Planted:
    """A backend whose ``hvp`` is ``_hvp`` with the given bug switches."""

    def __init__(self, name, **bugs):
        self.name, self.bugs = name, bugs

    def grad(self, weights, x):
        raise NotImplementedError("an HVP-only test backend")

    def hvp(self, weights, x, v):
        return _hvp(weights, x, v, **self.bugs)


CORRECT = Planted("correct")
BUGS = [
    Planted("forgets_the_tangent_of_y", drop_y_dot=True),
    Planted("forgets_v_in_the_backward_pass", drop_v_back=True),
    Planted("drops_the_relu_mask_in_the_tangent", no_mask_dot=True),
    Planted("v_on_the_wrong_layer", roll_v=True),
    Planted("off_by_1e-3_at_the_largest_entry", off_at_largest=1e-3),
]

#: Right in float64, 1 % off in float32: the re-run in the other precision must not be its tolerance.
FLOAT32_ONLY = Planted("one_percent_off_in_float32_only", float32_scale=1.01)
