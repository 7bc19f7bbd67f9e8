"""The custom op of ``custom_op.py`` in every layer of a scanned stack: PyTorch's ``ModuleList`` of
``L`` residual layers ``x + fc(norm(x))`` (``norm``: the RMSNorm ``torch.autograd.Function``) against a
Flax linen ``nn.scan`` over one layer (``flax_model``) or an nnx ``nnx.scan`` over ``nnx.vmap``-made
layers (``nnx_model``), each ``norm`` a ``jax.custom_vjp``; the bugs of ``custom_op.BUGS`` planted in
the JAX backward of every layer's ``norm``.

The forward agrees; the gradients differ from the last layer back. Each scan step's gradients at its
modules' edges are captured on their own (one zero perturbation per step), so the verdict names the
last layer's norm, in backward order the first whose backward differs: ``layers.3.norm``.

Run from the repository root::

    crosscheck run --workload examples.port.custom_op_scanned:port --reference torch
    crosscheck run --workload examples.port.custom_op_scanned:missing_term --reference torch
    crosscheck run --workload examples.port.custom_op_scanned:nnx_missing_term --reference torch
"""

from __future__ import annotations

from examples.port.custom_op import BUGS, EPS

#: Layers, width, batch, tokens.
L, D, BATCH, TOKENS = 4, 8, 2, 3


def torch_model():
    """The original, in eval mode: ``L`` layers ``x + fc(norm(x))`` in a ``ModuleList``."""
    import torch
    from torch import nn

    from examples.port._custom_op_torch import FusedRMSNorm

    class Layer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm, self.fc = FusedRMSNorm(D, EPS), nn.Linear(D, D)

        def forward(self, x):
            return x + self.fc(self.norm(x))

    class Stack(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers = nn.ModuleList(Layer() for _ in range(L))

        def forward(self, x):
            for layer in self.layers:
                x = layer(x)
            return x

    torch.manual_seed(0)
    model = Stack()
    with torch.no_grad():  # a trained norm's scale, not its init of ones
        for layer in model.layers:
            layer.norm.weight.uniform_(0.5, 1.5)
    return model.eval()


def flax_model(bug: str = ""):
    """The port in Flax linen: ``nn.scan`` over one layer; ``bug`` in every layer's norm's backward."""
    import flax.linen as nn

    from examples.port._custom_op_jax import FusedRMSNorm

    class Layer(nn.Module):
        @nn.compact
        def __call__(self, x, _):
            return x + nn.Dense(D, name="fc")(FusedRMSNorm(EPS, bug, name="norm")(x)), None

    class Stack(nn.Module):
        @nn.compact
        def __call__(self, x):
            scanned = nn.scan(Layer, variable_axes={"params": 0}, split_rngs={"params": True}, length=L)
            return scanned(name="layers")(x, None)[0]

    return Stack()


def nnx_model(bug: str = ""):
    """The port in Flax nnx: ``nnx.vmap``-made layers run by ``nnx.scan``; ``bug`` as in ``flax_model``."""
    import jax.numpy as jnp
    from flax import nnx

    from examples.port._custom_op_jax import rms_norm

    class FusedRMSNorm(nnx.Module):
        def __init__(self) -> None:
            self.scale = nnx.Param(jnp.ones((D,)))

        def __call__(self, x):
            return rms_norm(EPS, bug)(x, self.scale[...])

    class Layer(nnx.Module):
        def __init__(self, rngs: nnx.Rngs) -> None:
            self.norm, self.fc = FusedRMSNorm(), nnx.Linear(D, D, rngs=rngs)

        def __call__(self, x):
            return x + self.fc(self.norm(x))

    class Stack(nnx.Module):
        def __init__(self, rngs: nnx.Rngs) -> None:
            @nnx.split_rngs(splits=L)
            @nnx.vmap(in_axes=(0,), out_axes=0)
            def make(rngs):
                return Layer(rngs)

            self.layers = make(rngs)

        def __call__(self, x):
            @nnx.scan(in_axes=(nnx.Carry, 0), out_axes=nnx.Carry)
            def step(x, layer):
                return layer(x)

            return step(x, self.layers)

    return Stack(nnx.Rngs(0))


def tokens(rng, dtype):
    """A batch of ``BATCH`` sequences of ``TOKENS`` vectors of width ``D``."""
    return {"x": rng.standard_normal((BATCH, TOKENS, D)).astype(dtype)}


def make_port(name="custom-op-scanned", bug="", kind="linen"):
    import crosscheck

    return crosscheck.Port(
        name=name,
        torch=torch_model(),
        jax=(flax_model if kind == "linen" else nnx_model)(bug),
        inputs=tokens,
        description=f"{L} layers x + Linear(RMSNorm(x)) (a custom op), ModuleList -> {kind} scan",
    )


def __getattr__(name):  # the ports are built when asked for: importing this module imports no framework
    kind, _, bug = ("nnx", "", name[4:]) if name.startswith("nnx_") else ("linen", "", name)
    if bug == "port":
        return make_port(f"custom-op-scanned-{kind}", kind=kind)
    if bug in BUGS:
        return make_port(f"custom-op-scanned-{kind}-{bug}".replace("_", "-"), kind=kind, **BUGS[bug].change)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
