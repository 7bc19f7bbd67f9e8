"""One forward pass of each side of a port, every module's inputs and outputs recorded (``Record``): PyTorch's
(``torch_side.capture``) and the JAX port's (``JaxSide.capture``), at the dtype of the arrays given.
The module comparison (``workload.PortJudge``) and the forward check (``forward``) call them through the
engine's guarded call."""

from __future__ import annotations

import numpy as np

from crosscheck._workloads.port.build import Prepared, jax_leaves


def torch_capture(prepared: Prepared, params: dict, inputs: dict) -> list:
    """The PyTorch module's records of one forward pass at ``params`` and ``inputs`` (PyTorch's names).

    The arrays are the engine's private copies (a guarded call's arguments): the tensors share their
    memory (``torch_side.shared``) rather than copy the model once more."""
    from crosscheck._workloads.port import torch_side

    state = torch_side.shared({**params, **prepared.torch_state(inputs)})
    return torch_side.capture(prepared.torch_side, state, torch_side.shared(prepared.user_inputs(inputs)))


def jax_capture(prepared: Prepared, params: dict, inputs: dict) -> list:
    """The JAX port's records of one forward pass at PyTorch's ``params`` (mapped to the port's leaves)
    and ``inputs`` (through the port's ``jax_inputs``), in float64 under x64 when the arrays are."""
    import jax

    from crosscheck._workloads.port import jax_side

    wide = any(v.dtype == np.float64 for v in params.values())
    with jax.enable_x64(wide):
        p, i = jax_side.to_jax(params), jax_side.to_jax(inputs)
        leaves = jax_leaves(prepared, p, i)
        jax_in = (
            prepared.port.jax_inputs(prepared.user_inputs(i))
            if prepared.port.jax_inputs
            else prepared.user_inputs(i)
        )
        dtype = next(iter(p.values())).dtype
        return prepared.jax_side.capture(leaves, dict(jax_in), dtype)
