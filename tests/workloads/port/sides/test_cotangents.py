"""Each side's cotangents (``sides/torch_cotangents.py``, ``sides/jax_cotangents.py``): the gradient
reaching each module's output and the one leaving its first input are those autodiff gives, on both
sides of the custom op example; its custom op is found on each side, and no other module is called
one."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("flax")


@pytest.fixture(scope="module")
def both():
    """Both sides' cotangents of the healthy custom op example at one float64 point."""
    import jax

    from crosscheck._workloads.port.declare.build import (
        jax_implementation,
        output_layouts,
        torch_implementation,
    )
    from crosscheck._workloads.port.sides import jax_cotangents, torch_cotangents
    from examples.port import custom_op

    prepared = custom_op.port.prepared
    # as the judge does before any backend runs: the output's layout proven once, by a pass of its own,
    # which a capture made inside the loss's first call would otherwise record too
    output_layouts(prepared)
    params, inputs = prepared.workload.generate(np.random.default_rng(1), "float64")
    params = {k: v.astype(np.float64) for k, v in params.items()}
    torch_got = torch_cotangents.cotangents(
        prepared.torch_side, torch_implementation(prepared), dict(params), dict(inputs)
    )
    with jax.enable_x64(True):
        jax_got = jax_cotangents.cotangents(jax_implementation(prepared), dict(params), dict(inputs))
    return prepared, params, inputs, torch_got, jax_got


def _by_name(records):
    return {r.name: r for r in records}


def test_both_sides_give_the_same_cotangents_at_each_module(both):
    _, _, _, (torch_records, _), (jax_records, _) = both
    theirs, mine = _by_name(torch_records), _by_name(jax_records)
    assert list(theirs) == ["fc1", "norm", "act", "fc2"]  # the order the forward calls finished
    assert list(mine) == ["fc1", "norm", "fc2"]  # the GELU is a function in the port
    for name in mine:
        assert len(theirs[name].outputs) == len(mine[name].outputs) == 1
        assert len(theirs[name].inputs) == len(mine[name].inputs) == 1
        for a, b in (
            (theirs[name].outputs[0], mine[name].outputs[0]),
            (theirs[name].inputs[0], mine[name].inputs[0]),
        ):
            assert a.shape == b.shape and np.abs(a).max() > 0
            assert np.abs(a - b).max() <= 1e-12 * np.abs(a).max()


def test_the_gradient_leaving_the_first_module_s_input_is_the_loss_s_gradient_of_the_input(both):
    import torch

    from crosscheck._workloads.port.declare.build import torch_implementation

    prepared, params, inputs, (torch_records, _), _ = both
    x = torch.tensor(inputs["x"], requires_grad=True)
    loss = torch_implementation(prepared)({k: torch.tensor(v) for k, v in params.items()}, {"x": x})
    (expected,) = torch.autograd.grad(loss, [x])
    assert np.allclose(_by_name(torch_records)["fc1"].inputs[0], expected.numpy(), rtol=0, atol=1e-14)


def test_the_custom_op_is_found_on_each_side_and_no_other_module(both):
    _, _, _, (_, theirs), (_, mine) = both
    assert theirs == {"norm": ("RMSNormFunction",)}
    assert mine == {"norm": ("jax.custom_vjp",)}


def test_a_custom_jvp_is_found_in_the_module_that_runs_it():
    import flax.linen as nn
    import jax
    import jax.numpy as jnp

    from crosscheck._workloads.port.sides import jax_cotangents

    class Net(nn.Module):
        @nn.compact
        def __call__(self, x):
            h = nn.Dense(3, name="inner")(x)
            return nn.Dense(2, name="outer")(jax.nn.relu(h))  # relu: a custom_jvp, outside both modules

    class Relu(nn.Module):
        @nn.compact
        def __call__(self, x):
            return jax.nn.relu(x)

    class WithRelu(nn.Module):
        @nn.compact
        def __call__(self, x):
            return nn.Dense(2, name="outer")(Relu(name="act")(nn.Dense(3, name="inner")(x)))

    x = jnp.ones((2, 4))
    for model, expected in ((Net(), {}), (WithRelu(), {"act": ("jax.custom_jvp",)})):
        variables = model.init(jax.random.key(0), x)

        def loss(params, inputs, model=model):
            return model.apply(params, inputs["x"]).sum()

        records, found = jax_cotangents.cotangents(loss, variables, {"x": x})
        assert found == expected
        assert [r.name for r in records] == (
            ["inner", "outer"] if not expected else ["inner", "act", "outer"]
        )


def _scanned_cotangents(kind):
    """Both sides' cotangents of a tiny scanned port (``tests/support/scanned.py``, healthy; each
    layer calls its linear twice) at one float64 point."""
    import jax

    from crosscheck._workloads.port.declare.build import output_layouts, torch_implementation
    from crosscheck._workloads.port.judge import backward
    from crosscheck._workloads.port.sides import torch_cotangents
    from tests.support import scanned

    prepared = scanned.port(kind, twice=True).prepared
    output_layouts(prepared)
    params, inputs = prepared.workload.generate(np.random.default_rng(2), "float64")
    params = {k: v.astype(np.float64) for k, v in params.items()}
    theirs, _ = torch_cotangents.cotangents(
        prepared.torch_side, torch_implementation(prepared), dict(params), dict(inputs)
    )
    with jax.enable_x64(True):
        mine, custom = backward.jax_chains(prepared, dict(params), dict(inputs))
    return _by_name(theirs), _by_name(mine), custom


@pytest.mark.parametrize("kind", ["linen", "nnx"])
def test_each_scan_step_s_cotangents_are_those_of_pytorch_s_layer(kind):
    """A call in a scan's step is perturbed with one zero per step: each step's cotangents are
    PyTorch's layer's, exactly, a step's second call too (``layers.linear@2#2``)."""
    from tests.support import scanned

    theirs, mine, custom = _scanned_cotangents(kind)
    # nnx's layer runs `nnx.relu` (jax.nn.relu, a custom_jvp) on its input; linen's takes a tuple first
    relu = {f"layers@{i}": ("jax.custom_jvp",) for i in range(scanned.L)} if kind == "nnx" else {}
    assert custom == relu
    for layer in range(scanned.L):
        for k, suffix in ((1, ""), (2, "#2")):
            a, b = theirs[f"layers.{layer}.linear{suffix}"], mine[f"layers.linear@{layer}{suffix}"]
            for x, y in ((a.outputs[0], b.outputs[0]), (a.inputs[0], b.inputs[0])):
                assert x.shape == y.shape and np.abs(x).max() > 0, (layer, k)
                assert np.abs(x - y).max() <= 1e-12 * np.abs(x).max(), (layer, k)
    assert not any("@*" in name for name in mine)


def test_a_custom_vjp_in_a_scan_s_step_is_found_at_its_module_in_each_step_and_no_other():
    """A custom op inside a checkpointed scan's step: its module, in every step, and no other module of
    the step (the checkpoint around them is read through)."""
    import flax.linen as nn
    import jax
    import jax.numpy as jnp

    from crosscheck._workloads.port.sides import jax_cotangents
    from examples.port._custom_op_jax import FusedRMSNorm

    class Layer(nn.Module):
        @nn.compact
        def __call__(self, x, _):
            h = nn.Dense(4, name="fc")(FusedRMSNorm(1e-6, name="norm")(x))
            return x + jax.nn.relu(nn.Dense(4, name="out")(h)), None  # relu: a custom_jvp, in no module

    class Stack(nn.Module):
        @nn.compact
        def __call__(self, x):
            scanned = nn.scan(
                nn.remat(Layer), variable_axes={"params": 0}, split_rngs={"params": True}, length=3
            )
            return scanned(name="layers")(x, None)[0]

    x = jnp.ones((2, 4))
    variables = Stack().init(jax.random.key(0), x)
    records, found = jax_cotangents.cotangents(
        lambda p, i: Stack().apply(p, i["x"]).sum(), variables, {"x": x}
    )
    assert found == {f"layers.norm@{i}": ("jax.custom_vjp",) for i in range(3)} | {
        f"layers@{i}": ("jax.custom_jvp", "jax.custom_vjp") for i in range(3)
    }
    assert {f"layers.fc@{i}" for i in range(3)} <= {r.name for r in records}
