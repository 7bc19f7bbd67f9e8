"""A workload without a NumPy reference: an MLP with LayerNorm and GELU, in PyTorch and in JAX.

The oracle differences each implementation's own loss, evaluated in float64 without autodiff, and
compares the two implementations with each other. The loss is ``crosscheck.projection_loss`` of the
outputs (a fixed random projection): it cannot be flat in the parameters.

``crosscheck run --workload examples.no_reference:workload`` checks the default model;
``mlp(...)`` builds others (the benchmarks' models of 10^3 to 10^7 parameters, and variants with a
planted bug: a tanh GELU port, a wrong custom backward, a flat loss, a module pinned to float32).
"""

from __future__ import annotations

import functools
import itertools
import math

import numpy as np

import crosscheck

#: LayerNorm's epsilon inside the model, and in the flat loss's final normalization (BERT's 1e-12).
EPS, FLAT_EPS = 1e-5, 1e-12


def shapes(widths: tuple[int, ...]) -> dict[str, tuple[int, ...]]:
    """Parameters of the MLP: ``w{l}, b{l}`` per layer, ``g{l}, beta{l}`` (LayerNorm) per hidden layer."""
    out: dict[str, tuple[int, ...]] = {}
    for layer, (n_in, n_out) in enumerate(itertools.pairwise(widths)):
        out[f"w{layer}"], out[f"b{layer}"] = (n_in, n_out), (n_out,)
        if layer < len(widths) - 2:
            out[f"g{layer}"], out[f"beta{layer}"] = (n_out,), (n_out,)
    return out


def _generate(widths: tuple[int, ...], batch: int):
    def generate(rng: np.random.Generator, dtype: str):
        params = {}
        for k, shape in shapes(widths).items():
            if k.startswith("w"):
                params[k] = rng.standard_normal(shape) / math.sqrt(shape[0])
            elif k.startswith("g"):
                params[k] = 1.0 + 0.1 * rng.standard_normal(shape)
            else:
                params[k] = 0.1 * rng.standard_normal(shape)
        return params, {"x": rng.standard_normal((batch, widths[0]))}

    return generate


def torch_forward(p, x, layers: int, *, gelu: str = "exact", backward: str = "right"):
    """The MLP in PyTorch; ``backward="wrong"`` uses a GELU whose backward is the tanh one's."""
    import torch.nn.functional as F

    h = x
    for layer in range(layers):
        z = h @ p[f"w{layer}"] + p[f"b{layer}"]
        if layer == layers - 1:
            return z
        z = F.layer_norm(z, z.shape[-1:], eps=EPS) * p[f"g{layer}"] + p[f"beta{layer}"]
        if backward == "wrong" and layer == 0:
            h = _wrong_gelu().apply(z)
        else:
            h = F.gelu(z, approximate="tanh" if gelu == "tanh" else "none")
    return h


def jax_forward(p, x, layers: int, *, gelu: str = "exact", backward: str = "right"):
    """The MLP in JAX; ``backward="wrong"`` uses a GELU whose backward is the tanh one's."""
    import jax
    import jax.numpy as jnp

    h = x
    for layer in range(layers):
        z = h @ p[f"w{layer}"] + p[f"b{layer}"]
        if layer == layers - 1:
            return z
        mean = jnp.mean(z, axis=-1, keepdims=True)
        var = jnp.mean((z - mean) ** 2, axis=-1, keepdims=True)
        z = (z - mean) / jnp.sqrt(var + EPS) * p[f"g{layer}"] + p[f"beta{layer}"]
        if backward == "wrong" and layer == 0:
            h = _jax_wrong_gelu()(z)
        else:
            h = jax.nn.gelu(z, approximate=gelu == "tanh")
    return h


@functools.lru_cache(maxsize=1)
def _jax_wrong_gelu():
    import jax

    @jax.custom_vjp
    def gelu(z):
        return jax.nn.gelu(z, approximate=False)

    def forward(z):
        return gelu(z), z

    def backward(z, grad):
        _, pullback = jax.vjp(lambda v: jax.nn.gelu(v, approximate=True), z)
        return pullback(grad)

    gelu.defvjp(forward, backward)
    return gelu


@functools.lru_cache(maxsize=8)
def _jax_scale_grad(factor: float):
    import jax

    @jax.custom_vjp
    def scaled(x):
        return x

    scaled.defvjp(lambda x: (x, None), lambda _, grad: (grad * factor,))
    return scaled


@functools.lru_cache(maxsize=1)
def _torch_scale_grad():
    import torch

    class _ScaleGrad(torch.autograd.Function):
        """The identity forward; its backward scales the gradient: a planted relative error."""

        @staticmethod
        def forward(ctx, x, factor):
            ctx.factor = factor
            return x.view_as(x)

        @staticmethod
        def backward(ctx, grad):
            return grad * ctx.factor, None

    return _ScaleGrad


def plant(p: dict, planted: tuple[str, str, float] | None, framework: str) -> dict:
    """``p`` with the gradient of ``planted = (framework, parameter, error)`` off by ``1 + error``."""
    if planted is None or planted[0] != framework:
        return p
    _, name, error = planted
    scaled = _torch_scale_grad().apply if framework == "torch" else _jax_scale_grad(1.0 + error)
    value = scaled(p[name], 1.0 + error) if framework == "torch" else scaled(p[name])
    return {**p, name: value}


@functools.lru_cache(maxsize=1)
def _wrong_gelu():
    import torch
    import torch.nn.functional as F

    class _WrongGelu(torch.autograd.Function):
        """The exact GELU forward, the tanh GELU's derivative backward: forward right, derivative wrong."""

        @staticmethod
        def forward(ctx, z):
            ctx.save_for_backward(z)
            return F.gelu(z)

        @staticmethod
        def backward(ctx, grad):
            (z,) = ctx.saved_tensors
            with torch.enable_grad():
                zz = z.detach().requires_grad_()
                (slope,) = torch.autograd.grad(F.gelu(zz, approximate="tanh").sum(), zz)
            return grad * slope

    return _WrongGelu


def _final(out, loss: str, framework: str):
    """The loss of the outputs: the projection, or the flat ``sum(LayerNorm(out) ** 2)``."""
    if loss == "projection":
        return crosscheck.projection_loss(out)
    if framework == "torch":
        import torch.nn.functional as F

        return (F.layer_norm(out, out.shape[-1:], eps=FLAT_EPS) ** 2).sum()
    import jax.numpy as jnp

    mean = jnp.mean(out, axis=-1, keepdims=True)
    normed = (out - mean) / jnp.sqrt(jnp.mean((out - mean) ** 2, axis=-1, keepdims=True) + FLAT_EPS)
    return jnp.sum(normed**2)


def mlp(
    widths: tuple[int, ...] = (6, 16, 16, 3),
    batch: int = 8,
    *,
    loss: str = "projection",
    jax_gelu: str = "exact",
    torch_backward: str = "right",
    jax_backward: str = "right",
    planted: tuple[str, str, float] | None = None,
    pinned: str | None = None,
    name: str = "mlp-layernorm",
) -> crosscheck.Workload:
    """The MLP workload (no NumPy reference).

    Args:
        widths: input width, hidden widths, output width.
        batch: rows of ``x``.
        loss: ``"projection"`` (``crosscheck.projection_loss``) or ``"flat"`` (``sum(LayerNorm(y) **
            2)``, a constant: the empty check's example).
        jax_gelu: ``"exact"`` or ``"tanh"`` (the port computes a different function).
        torch_backward, jax_backward: ``"right"`` or ``"wrong"`` (a custom GELU in the first layer whose
            backward is the tanh GELU's: forward right, derivative wrong).
        planted: ``(framework, parameter, error)``: that framework's gradient of the parameter is off
            by a relative ``error`` (a custom backward that scales it).
        pinned: ``"jax"`` or ``"torch"``: that implementation computes in float32 whatever it is given.
    """
    layers = len(widths) - 1

    def torch_loss(p, i):
        x = i["x"]
        if pinned == "torch":
            p, x = {k: v.float() for k, v in p.items()}, x.float()
        p = plant(p, planted, "torch")
        return _final(torch_forward(p, x, layers, backward=torch_backward), loss, "torch")

    def jax_loss(p, i):
        import jax.numpy as jnp

        x = i["x"]
        if pinned == "jax":
            p, x = {k: v.astype(jnp.float32) for k, v in p.items()}, x.astype(jnp.float32)
        p = plant(p, planted, "jax")
        return _final(jax_forward(p, x, layers, gelu=jax_gelu, backward=jax_backward), loss, "jax")

    return crosscheck.Workload(
        name=name,
        parameters=shapes(widths),
        inputs={"x": (batch, widths[0])},
        implementations={"torch": torch_loss, "jax": jax_loss},
        generate=_generate(widths, batch),
        description="MLP with LayerNorm and GELU, PyTorch and JAX, no NumPy reference",
    )


#: The default model: 3 layers, 467 parameters.
workload = mlp()
#: A larger one, 87568 parameters: screened (``oracle_mode="auto"``).
large = mlp((64, 256, 256, 16), 8, name="mlp-layernorm-large")
#: The default model with a wrong custom backward in PyTorch's first GELU (forward right).
wrong_backward = mlp(torch_backward="wrong", name="mlp-layernorm-wrong-backward")
#: The default model with the flat loss ``sum(LayerNorm(y) ** 2)``: an empty check.
flat = mlp(loss="flat", name="mlp-layernorm-flat")
#: The default model with its JAX implementation pinned to float32.
pinned = mlp(pinned="jax", name="mlp-layernorm-pinned")


def _attention_torch(p, i):
    import torch

    q, k = i["x"] @ p["wq"], i["x"] @ p["wk"] + p["bk"]
    weights = torch.softmax(q @ k.T / math.sqrt(q.shape[1]), dim=1)
    return crosscheck.projection_loss(weights @ (i["x"] @ p["wv"]) @ p["wo"])


def _attention_jax(p, i):
    import jax
    import jax.numpy as jnp

    q, k = i["x"] @ p["wq"], i["x"] @ p["wk"] + p["bk"]
    weights = jax.nn.softmax(q @ k.T / jnp.sqrt(q.shape[1]), axis=1)
    return crosscheck.projection_loss(weights @ (i["x"] @ p["wv"]) @ p["wo"])


#: Self-attention with a key bias ``bk`` (its gradient is zero by construction: the softmax is
#: shift-invariant, as BERT's attention key biases) and a parameter the loss never uses (its gradient is
#: exactly zero).
ATTENTION = crosscheck.Workload(
    name="attention-key-bias",
    parameters={"wq": (6, 4), "wk": (6, 4), "bk": (4,), "wv": (6, 4), "wo": (4, 2), "unused": (3,)},
    inputs={"x": (5, 6)},
    implementations={"torch": _attention_torch, "jax": _attention_jax},
    description="self-attention with a key bias (zero gradient by construction) and an unused parameter",
)
