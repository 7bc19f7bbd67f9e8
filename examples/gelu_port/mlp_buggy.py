"""The port with the classic GELU bug: ``jax.nn.gelu`` is the tanh approximation unless told otherwise.

Run from the repository root: ``crosscheck run --workload examples.gelu_port.mlp_buggy:workload``.
"""

from __future__ import annotations

import crosscheck

from .model import INPUTS, PARAMETERS, reference_loss, torch_loss


def jax_loss(params, inputs):
    import jax
    import jax.numpy as jnp

    h = jax.nn.gelu(inputs["x"] @ params["w1"] + params["b1"])  # approximate=True by default: the bug
    y = h @ params["w2"] + params["b2"]
    return jnp.mean((y - inputs["target"]) ** 2)


workload = crosscheck.Workload(
    name="mlp-gelu-buggy",
    parameters=PARAMETERS,
    inputs=INPUTS,
    reference=reference_loss,
    implementations={"jax": jax_loss, "torch": torch_loss},
    description="two-layer GELU MLP; the JAX port uses jax.nn.gelu's default tanh approximation",
)
