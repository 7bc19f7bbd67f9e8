"""Tiny scanned ports for the stacked-layer tests: a PyTorch ``ModuleList`` of four ``Linear`` + ReLU
layers against a Flax linen ``nn.scan`` over ``nn.Dense`` (with ``nn.remat`` inside), an nnx
``nnx.scan`` over ``nnx.vmap``-made layers, and an Equinox ``eqx.filter_vmap`` + ``jax.lax.scan``
that returns its per-step outputs stacked (``jax_intermediates=("layers.*.linear",)``), or, as
``"equinox-batched"``, takes the whole batch and returns its output only.

The keywords plant bugs: ``bug_layer=2`` (layer 2's linear adds ``0.01``: a bug in one layer's
computation; ``"all"``: in every layer), ``reverse=True`` (the scan runs the layers last to first: the
layers stacked in the wrong order), ``backward=True`` (``bug_layer``'s bug in the backward pass only:
the forward exact, the gradient through that layer's linear 1.5 times the right one) and
``overrides`` (a stacked kernel not transposed). Two keywords
change both sides alike (healthy as they are): ``twice=True`` (each layer calls its linear twice: a
scan's step calls a submodule more than once) and ``backwards=True`` (PyTorch runs its layers last to
first, and the scan too, ``reverse=True``).
"""

from __future__ import annotations

import functools

import numpy as np

import crosscheck

L, D, BATCH = 4, 6, 3


def torch_model(twice=False, backwards=False):
    import torch
    from torch import nn

    class Layer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = nn.Linear(D, D)
            self.act = nn.ReLU()

        def forward(self, x):
            return self.act(self.linear(self.linear(x)) if twice else self.linear(x))

    class Stack(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers = nn.ModuleList(Layer() for _ in range(L))

        def forward(self, x):
            for layer in reversed(self.layers) if backwards else self.layers:
                x = layer(x)
            return x

    torch.manual_seed(0)
    return Stack().eval()


def inputs(rng, dtype):
    return {"x": rng.standard_normal((BATCH, D)).astype(dtype)}


def _planted(x, step, bug_layer, backward=False):
    """``x`` with the bug of layer ``bug_layer`` (``+ 0.01``) where ``step`` is that layer (``"all"``:
    every layer); with ``backward``, a bug of the backward pass only: ``x`` exactly, its gradient 1.5
    times the right one (``x + 0.5 * (x - stop_gradient(x))``)."""
    import jax
    import jax.numpy as jnp

    if bug_layer is None:
        return x
    size = 0.5 if backward else 0.01
    mask = size if bug_layer == "all" else jnp.where(step == bug_layer, size, 0.0)
    change = x - jax.lax.stop_gradient(x) if backward else 1.0
    return x + jnp.asarray(mask * change).astype(x.dtype)


def linen_model(bug_layer=None, reverse=False, name="layers", twice=False, backward=False):
    import flax.linen as nn
    import jax.numpy as jnp

    class Linear(nn.Module):  # Flax's Dense, with the step it runs at (for the planted bug)
        @nn.compact
        def __call__(self, x, step):
            kernel = self.param("kernel", nn.initializers.lecun_normal(), (D, D))
            bias = self.param("bias", nn.initializers.normal(), (D,))
            return _planted(x @ kernel + bias, step, bug_layer, backward)

    class Layer(nn.Module):
        @nn.compact
        def __call__(self, carry, index):  # index: the layer's (the scan's xs), whichever the order
            x, step = carry
            if bug_layer is None:  # the healthy port scans Flax's own nn.Dense
                dense = nn.Dense(D, name="linear")
                return (nn.relu(dense(dense(x)) if twice else dense(x)), step + 1), None
            linear = Linear(name="linear")
            y = linear(linear(x, index), index) if twice else linear(x, index)
            return (nn.relu(y), step + 1), None

    class Stack(nn.Module):
        @nn.compact
        def __call__(self, x):
            body = nn.remat(Layer)  # the scan + checkpoint pattern
            scanned = nn.scan(
                body, variable_axes={"params": 0}, split_rngs={"params": True}, length=L, reverse=reverse
            )
            start = (x, jnp.zeros((), jnp.int32))
            (x, _), _ = scanned(name=name)(start, jnp.arange(L))  # name None: ScanCheckpointLayer_0
            return x

    return Stack()


def nnx_model(bug_layer=None, reverse=False, twice=False, backward=False):
    import jax.numpy as jnp
    from flax import nnx

    class Linear(nnx.Linear):  # with the step it runs at (for the planted bug)
        def __call__(self, x, step):
            return _planted(super().__call__(x), step, bug_layer, backward)

    class Layer(nnx.Module):
        def __init__(self, rngs):
            self.linear = Linear(D, D, rngs=rngs)

        def __call__(self, x, step):
            return nnx.relu(self.linear(self.linear(x, step), step) if twice else self.linear(x, step))

    class Stack(nnx.Module):
        def __init__(self, rngs):
            @nnx.split_rngs(splits=L)
            @nnx.vmap(in_axes=(0,), out_axes=0)
            def make(rngs):
                return Layer(rngs)

            self.layers = make(rngs)

        def __call__(self, x):
            @nnx.scan(in_axes=(nnx.Carry, 0, 0), out_axes=nnx.Carry, reverse=reverse)
            def step(carry, layer, index):  # index: the layer's, whichever the order
                x, i = carry
                return layer(x, index), i + 1

            return step((x, jnp.zeros((), jnp.int32)), self.layers, jnp.arange(L))[0]

    model = Stack(nnx.Rngs(0))
    model.eval()
    return model


def equinox_model(bug_layer=None, reverse=False, backward=False):
    import equinox as eqx
    import jax

    class Layer(eqx.Module):
        linear: eqx.nn.Linear

        def __init__(self, key):
            self.linear = eqx.nn.Linear(D, D, key=key)

    class Stack(eqx.Module):
        layers: Layer

        def __init__(self, key):
            self.layers = eqx.filter_vmap(Layer)(jax.random.split(key, L))

        def __call__(self, x):  # one example (D,)
            params, static = eqx.partition(self.layers, eqx.is_array)

            def step(carry, layer_params):
                h, i = carry
                layer = eqx.combine(layer_params, static)
                y = _planted(layer.linear(h), i, bug_layer, backward)
                return (jax.nn.relu(y), i + 1), y

            (h, _), linear = jax.lax.scan(step, (x, 0), params, reverse=reverse)
            return h, {"layers.*.linear": linear}

    return Stack(jax.random.key(0))


def equinox_batched_model(bug_layer=None, reverse=False, backward=False):
    """The Equinox stack called on the whole batch, no ``jax.vmap`` around it: its ``Linear`` takes
    ``(B, D)`` (PyTorch's (out, in) weight), each layer a module called in the scan's step."""
    import equinox as eqx
    import jax
    import jax.numpy as jnp

    class Linear(eqx.Module):  # with the step it runs at (for the planted bug)
        weight: jax.Array
        bias: jax.Array

        def __init__(self, key):
            self.weight, self.bias = jax.random.normal(key, (D, D)) / D**0.5, jnp.zeros((D,))

        def __call__(self, x, step):
            return _planted(x @ self.weight.T + self.bias, step, bug_layer, backward)

    class Layer(eqx.Module):
        linear: Linear

        def __init__(self, key):
            self.linear = Linear(key)

        def __call__(self, x, step):
            return jax.nn.relu(self.linear(x, step))

    class Stack(eqx.Module):
        layers: Layer

        def __init__(self, key):
            self.layers = eqx.filter_vmap(Layer)(jax.random.split(key, L))

        def __call__(self, x):  # the batch (B, D)
            params, static = eqx.partition(self.layers, eqx.is_array)

            def step(h, xs):
                layer_params, index = xs
                return eqx.combine(layer_params, static)(h, index), None

            return jax.lax.scan(step, x, (params, jnp.arange(L)), reverse=reverse)[0]

    return Stack(jax.random.key(0))


def _batched(model, inputs):
    import jax

    out, found = jax.vmap(model)(inputs["x"])
    return out, {k: v.swapaxes(0, 1) for k, v in found.items()}  # (B, L, D) -> (L, B, D)


def port(kind="linen", bug_layer=None, reverse=False, twice=False, backwards=False, backward=False, **kwargs):
    unnamed = functools.partial(linen_model, name=None)  # the scan left unnamed, as Flax's docs write it
    make = {
        "linen": linen_model,
        "linen-unnamed": unnamed,
        "nnx": nnx_model,
        "equinox": equinox_model,
        "equinox-batched": equinox_batched_model,
    }[kind]
    extra = {"jax_call": _batched, "jax_intermediates": ("layers.*.linear",)} if kind == "equinox" else {}
    both = {"twice": twice} if twice else {}
    both.update({"backward": backward} if backward else {})
    return crosscheck.Port(
        name=f"scanned-{kind}",
        torch=torch_model(twice=twice, backwards=backwards),
        jax=make(bug_layer=bug_layer, reverse=reverse or backwards, **both),
        inputs=inputs,
        **{**extra, **kwargs},
    )


def verdict(p, dtype="float32", reference="torch"):
    report = crosscheck.run(workload=p, reference=reference, backends=["jax"], dtype=dtype)
    return report, report.backends["jax"].notes["port"]


__all__ = ["L", "np", "port", "verdict"]
