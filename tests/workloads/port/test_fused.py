"""Ports that are not one-to-one: layouts found through a class's bases."""

from __future__ import annotations

import importlib.util

import pytest

from crosscheck._workloads.port import mapping
from crosscheck._workloads.port.matching import Tensor

needs = {
    name: pytest.mark.skipif(importlib.util.find_spec(name) is None, reason=f"needs {name}")
    for name in ("torch", "flax")
}
E, H, D, EKV = 8, 2, 4, 4


def T(name, shape, module_type="", layout=None):
    return Tensor(tuple(name.split(".")), shape, "parameter", module_type, layout)


def J(path, shape, module_type="", layout=None):
    tokens = tuple(path.split("/"))
    return Tensor(tokens, shape, tokens[0], module_type, layout, skip=1)


def P(path, shape):  # a plain pytree's leaf: no collection, no owner
    return Tensor(tuple(path.split("/")), shape, "")


def rows(table):
    return [(e.torch.name, "/".join(e.jax.path), e.transform, e.take, e.box) for e in table.mapped()]


# ---- Layouts through the class's bases (PyTorch, Flax) -------------------------------------------------


@needs["torch"]
def test_multihead_attentions_out_proj_has_linears_layout():
    from torch import nn

    from crosscheck._workloads.port import torch_side

    described, _ = torch_side.tensors(nn.MultiheadAttention(E, H))
    out = next(t for t in described if t.name == "out_proj.weight")
    assert (out.module_type, out.layout) == ("NonDynamicallyQuantizableLinear (a Linear)", "out,in")
    # a square out_proj against a Dense of its name: the layouts decide (ambiguous before)
    table = mapping.build([out], [J("params/out_proj/kernel", (E, E), "Dense", "in,out")])
    assert rows(table) == [("out_proj.weight", "params/out_proj/kernel", "transpose", None, ())]


@needs["flax"]
def test_a_subclass_of_flax_dense_has_denses_layout():
    import flax.linen as nn
    import jax.numpy as jnp

    from crosscheck._workloads.port.jax_side import JaxSide

    class MyDense(nn.Dense):
        pass

    class Net(nn.Module):
        @nn.compact
        def __call__(self, x):
            return MyDense(E, name="fc")(x)

    side = JaxSide(Net(), None, None, {"x": jnp.zeros((2, E))})
    kernel = next(t for t in side.leaves if t.path[-1] == "kernel")
    assert (kernel.module_type, kernel.layout) == ("MyDense (a Dense)", "in,out")
