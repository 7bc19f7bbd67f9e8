"""The custom op example (``custom_op.py``) ported to Equinox: ``fc1`` -> ``norm`` (an RMSNorm whose
backward is a hand-written ``jax.custom_vjp``, ``_custom_op_jax.rms_norm``) -> exact GELU -> ``fc2``,
against the same PyTorch original (an ``autograd.Function``), with the same bugs planted in the JAX
backward only (``custom_op.BUGS``): each is named at ``norm``, as its backward and a custom op, as in
the linen and nnx ports.

The port's modules take the whole batch ``(B, T, D)``: its ``Linear`` is a small module of its own
(``x @ weight.T + bias``, PyTorch's (out, in) layout), so that every call is made outside ``jax.vmap``
and its gradients are compared. Two variants show where ``jax.vmap`` may go: ``layers_vmapped``
(Equinox's own ``eqx.nn.Linear``, mapped over the batch and the tokens, ``jax.vmap(jax.vmap(self.fc1))``:
the map of the module itself is its call on the batch, compared as such) and ``model_vmapped`` (a model
of one sequence, mapped over the batch by the port's call: no call is compared, one example's zero
would stand for the whole batch, and the verdict by parameters' gradients says why).

Run from the repository root::

    crosscheck run --workload examples.port.custom_op_equinox:port --reference torch
    crosscheck run --workload examples.port.custom_op_equinox:missing_term --reference torch
    crosscheck run --workload examples.port.custom_op_equinox:model_vmapped --reference torch
"""

from __future__ import annotations

from examples.port.custom_op import BUGS, D_IN, D_OUT, EPS, HIDDEN, tokens, torch_model

__all__ = ["BUGS", "equinox_model", "make_port", "tokens", "torch_model"]

#: The variants where ``jax.vmap`` goes (see the module docstring), each with ``missing_term`` planted.
VARIANTS = ("layers_vmapped", "model_vmapped")


def equinox_model(bug: str = "", vmap: str = ""):
    """The port in Equinox; ``bug`` plants one of ``BUGS`` in the JAX backward of ``norm``; ``vmap``:
    ``""`` (every module called on the batch), ``"layers"`` (``eqx.nn.Linear`` mapped over the tokens)
    or ``"model"`` (a model of one sequence: the port's call maps it over the batch)."""
    import equinox as eqx
    import jax
    import jax.numpy as jnp

    from examples.port._custom_op_jax import rms_norm

    class Linear(eqx.Module):  # PyTorch's (out, in) weight, on the last axis of any batch
        weight: jax.Array
        bias: jax.Array

        def __init__(self, d_in: int, d_out: int, key: jax.Array) -> None:
            self.weight = jax.random.normal(key, (d_out, d_in)) / d_in**0.5
            self.bias = jnp.zeros((d_out,))

        def __call__(self, x):
            return x @ self.weight.T + self.bias

    class FusedRMSNorm(eqx.Module):
        weight: jax.Array

        def __init__(self, width: int) -> None:
            self.weight = jnp.ones((width,))

        def __call__(self, x):
            return rms_norm(EPS, bug)(x, self.weight)

    class EquinoxNet(eqx.Module):
        fc1: Linear | eqx.nn.Linear
        norm: FusedRMSNorm
        fc2: Linear | eqx.nn.Linear

        def __init__(self, key: jax.Array) -> None:
            a, b = jax.random.split(key)
            if vmap == "layers":
                self.fc1, self.fc2 = eqx.nn.Linear(D_IN, HIDDEN, key=a), eqx.nn.Linear(HIDDEN, D_OUT, key=b)
            else:
                self.fc1, self.fc2 = Linear(D_IN, HIDDEN, a), Linear(HIDDEN, D_OUT, b)
            self.norm = FusedRMSNorm(HIDDEN)

        def __call__(self, x):
            def linear(layer, h):  # Equinox's Linear takes one vector: mapped over the batch's axes
                return jax.vmap(jax.vmap(layer))(h) if vmap == "layers" else layer(h)

            return linear(self.fc2, jax.nn.gelu(self.norm(linear(self.fc1, x)), approximate=False))

    return EquinoxNet(jax.random.key(0))


def _per_sequence(model, inputs):
    import jax

    return jax.vmap(model)(inputs["x"])  # the batch axis, which the model of one sequence does not take


def make_port(name="custom-op-equinox", bug="", vmap=""):
    import crosscheck

    return crosscheck.Port(
        name=name,
        torch=torch_model(),
        jax=equinox_model(bug, vmap),
        inputs=tokens,
        jax_call=_per_sequence if vmap == "model" else None,
        description="Linear -> RMSNorm (autograd.Function / jax.custom_vjp) -> GELU -> Linear, in Equinox",
    )


def __getattr__(name):  # the ports are built when asked for: importing this module imports no framework
    if name == "port":
        return make_port()
    if name in BUGS:
        return make_port(f"custom-op-equinox-{name}".replace("_", "-"), **BUGS[name].change)
    if name in VARIANTS:
        where = name.split("_")[0]
        return make_port(f"custom-op-equinox-{where}-vmapped", bug="missing_term", vmap=where)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
