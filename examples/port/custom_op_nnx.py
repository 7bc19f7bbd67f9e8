"""The custom op example (``custom_op.py``) ported to Flax nnx: ``fc1`` (``nnx.Linear``) -> ``norm``
(an RMSNorm whose backward is a hand-written ``jax.custom_vjp``, ``_custom_op_jax.rms_norm``) -> exact
GELU -> ``fc2``, against the same PyTorch original (an ``autograd.Function``), with the same bugs
planted in the JAX backward only (``custom_op.BUGS``): each is named at ``norm``, as its backward and a
custom op, as in the linen port.

Run from the repository root::

    crosscheck run --workload examples.port.custom_op_nnx:port --reference torch
    crosscheck run --workload examples.port.custom_op_nnx:missing_term --reference torch
"""

from __future__ import annotations

from examples.port.custom_op import BUGS, D_IN, D_OUT, EPS, HIDDEN, tokens, torch_model

__all__ = ["BUGS", "make_port", "nnx_model", "tokens", "torch_model"]


def nnx_model(bug: str = ""):
    """The port in Flax nnx; ``bug`` plants one of ``BUGS`` in the JAX backward of ``norm``."""
    import jax
    import jax.numpy as jnp
    from flax import nnx

    from examples.port._custom_op_jax import rms_norm

    class FusedRMSNorm(nnx.Module):
        def __init__(self, width: int) -> None:
            self.scale = nnx.Param(jnp.ones((width,)))

        def __call__(self, x):
            return rms_norm(EPS, bug)(x, self.scale[...])

    class NnxNet(nnx.Module):
        def __init__(self, rngs: nnx.Rngs) -> None:
            self.fc1 = nnx.Linear(D_IN, HIDDEN, rngs=rngs)
            self.norm = FusedRMSNorm(HIDDEN)
            self.fc2 = nnx.Linear(HIDDEN, D_OUT, rngs=rngs)

        def __call__(self, x):
            return self.fc2(jax.nn.gelu(self.norm(self.fc1(x)), approximate=False))

    return NnxNet(nnx.Rngs(0))


def make_port(name="custom-op-nnx", bug=""):
    import crosscheck

    return crosscheck.Port(
        name=name,
        torch=torch_model(),
        jax=nnx_model(bug),
        inputs=tokens,
        description="Linear -> RMSNorm (autograd.Function / jax.custom_vjp) -> GELU -> Linear, in Flax nnx",
    )


def __getattr__(name):  # the ports are built when asked for: importing this module imports no framework
    if name == "port":
        return make_port()
    if name in BUGS:
        return make_port(f"custom-op-nnx-{name}".replace("_", "-"), **BUGS[name].change)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
