"""A Flax nnx port's cotangents (``sides/nnx_cotangents.py``): on the nnx twin of the custom op example
(``examples/port/custom_op_nnx.py``), the gradient reaching each module's output and the one leaving its
first input are PyTorch's, the custom op is found at ``norm`` and at no other module, and the side and
the module classes are left as they were."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("flax")


@pytest.fixture(scope="module")
def both():
    """Both sides' cotangents of the healthy nnx custom op example at one float64 point, and the side's
    rebuild and its modules' classes' ``__call__`` before the capture."""
    import jax

    from crosscheck._workloads.port.declare.build import output_layouts, torch_implementation
    from crosscheck._workloads.port.judge import backward
    from crosscheck._workloads.port.sides import torch_cotangents
    from examples.port import custom_op_nnx

    prepared = custom_op_nnx.port.prepared
    output_layouts(prepared)
    params, inputs = prepared.workload.generate(np.random.default_rng(1), "float64")
    params = {k: v.astype(np.float64) for k, v in params.items()}
    side = prepared.jax_side
    before = side.static, {type(m): type(m).__dict__.get("__call__") for m in _modules(side.model)}
    torch_got = torch_cotangents.cotangents(
        prepared.torch_side, torch_implementation(prepared), dict(params), dict(inputs)
    )
    with jax.enable_x64(True):
        jax_got = backward.jax_chains(prepared, dict(params), dict(inputs))
    return prepared, torch_got, jax_got, before


def _modules(model):
    from flax import nnx

    return [node for _, node in nnx.iter_graph(model) if isinstance(node, nnx.Module)]


def test_each_nnx_module_s_cotangents_are_pytorch_s(both):
    _, (torch_records, _), (jax_records, _), _ = both
    theirs, mine = {r.name: r for r in torch_records}, {r.name: r for r in jax_records}
    assert list(mine) == ["fc1", "norm", "fc2"]  # the order the calls finished; the GELU is a function
    for name in mine:
        assert len(mine[name].outputs) == len(mine[name].inputs) == 1
        for a, b in (
            (theirs[name].outputs[0], mine[name].outputs[0]),
            (theirs[name].inputs[0], mine[name].inputs[0]),
        ):
            assert a.shape == b.shape and np.abs(a).max() > 0
            assert np.abs(a - b).max() <= 1e-12 * np.abs(a).max()


def test_the_nnx_custom_op_is_found_at_norm_only(both):
    _, _, (_, mine), _ = both
    assert mine == {"norm": ("jax.custom_vjp",)}


def test_the_side_and_the_module_classes_are_left_as_they_were(both):
    prepared, _, _, (static, calls) = both
    side = prepared.jax_side
    assert side.static is static
    assert {type(m): type(m).__dict__.get("__call__") for m in _modules(side.model)} == calls
    from crosscheck._workloads.port.sides import nnx_side

    assert not any(hasattr(m, nnx_side.PATH) for m in _modules(side.model))  # the user's model untouched
