"""A small workload with a JAX implementation, loaded by its import string in a contained check's worker:
its JAX side's ``info()`` says whether XLA's deterministic GPU ops were asked for in that worker's
environment (``jax_deterministic``)."""

from __future__ import annotations

import numpy as np

import crosscheck


def _jax_loss(params, inputs):
    import jax.numpy as jnp

    return jnp.sum((inputs["x"] @ params["w"]) ** 2)


def _reference(params, inputs):
    return float(np.sum((inputs["x"] @ params["w"]) ** 2))


workload = crosscheck.Workload(
    name="deterministic-probe",
    parameters={"w": (3, 2)},
    inputs={"x": (4, 3)},
    reference=_reference,
    implementations={"jax": _jax_loss},
)
