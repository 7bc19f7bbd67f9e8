"""JAX's entry in the environment record (only once JAX is imported: recording never imports it)."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from crosscheck._compare.device import Arithmetic, level

from . import state


def record() -> dict[str, Any]:
    """Version, devices, precision settings, and whether float32 subnormals flush to zero."""
    import jax

    # device_put and a comparison on the host: jnp.float32(...) and `== 0` on a JAX array compile a
    # program each (~25 ms together here); only the halving itself must run in XLA.
    smallest_normal = jax.device_put(np.float32(np.finfo(np.float32).tiny))
    return {
        "version": jax.__version__,
        "devices": [str(d) for d in jax.devices()],
        "default_matmul_precision": str(jax.config.jax_default_matmul_precision),
        "x64_enabled_globally": bool(jax.config.jax_enable_x64),
        "subnormals_flushed": bool(np.asarray(_halve()(smallest_normal)) == 0),
        **({"allocator": state.SHARED[0]} if state.SHARED else {}),
    }


def side() -> dict[str, str]:
    """Where the JAX side runs now, and at what precision (its adapters' ``info()``, read where its
    calls run: inside the run's settings): the device a computation without an explicit placement uses
    (``jax.default_device`` in effect, else JAX's first), its ``platform`` (``cpu``, ``tpu``, ``gpu``)
    and ``device_kind`` ("TPU v5 lite"), the matmul precision in effect (``default`` when unset), and
    ``deterministic_ops`` ``on`` where this process's XLA flags ask for XLA's deterministic GPU ops."""
    import jax

    device = jax.config.jax_default_device or jax.devices()[0]
    if isinstance(device, str):  # a platform's name: its first device
        device = jax.devices(device)[0]
    precision = jax.config.jax_default_matmul_precision
    return {
        "device": str(device),
        "platform": str(device.platform),
        "device_kind": str(device.device_kind),
        "matmul_precision": str(precision or "default"),
        **({"deterministic_ops": "on"} if state.deterministic_ops() else {}),
    }


@functools.cache
def _halve() -> Any:
    """One jitted ``v / 2`` per process: a fresh lambda would be traced and compiled on every report."""
    import jax

    return jax.jit(lambda v: v / 2)


def line(j: dict[str, Any]) -> str:
    """The precision-relevant part of ``record()``'s entry, for the report's environment line: the
    process's own settings (what a run chose for the JAX side's calls is the header's ``where`` line)."""
    precision = j.get("default_matmul_precision")
    return (
        f"jax {j.get('version')} on {','.join(j.get('devices', []))}, global matmul precision "
        f"{'default' if precision in (None, 'None') else precision}, global x64 "
        f"{j.get('x64_enabled_globally')}, "
        f"subnormals flushed {j.get('subnormals_flushed')}"
        + (f"; {j['allocator']}" if j.get("allocator") else "")
    )


def arithmetic() -> Arithmetic:
    """Where JAX computes now (``side``: inside the run's placement, ``state.placed``), as the judge
    models its rounding: the platform, the matmul precision's level and the device's kind."""
    found = side()
    return Arithmetic(found["platform"], level(found["matmul_precision"]), found["device_kind"], "jax")
