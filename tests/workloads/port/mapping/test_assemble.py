"""The pieces a JAX leaf is made of (``assemble``): built, read back, and refused when they do not tile."""

from __future__ import annotations

import numpy as np
import pytest

from crosscheck._workloads.port.mapping import assemble
from crosscheck._workloads.port.mapping import table as mapping
from crosscheck._workloads.port.mapping.assemble import Piece
from crosscheck._workloads.port.mapping.matching import Entry, Tensor


def T(name: str, shape: tuple[int, ...]) -> Tensor:
    return Tensor(tuple(name.split(".")), shape)


def J(path: str, shape: tuple[int, ...]) -> Tensor:
    return Tensor(tuple(path.split("/")), shape, "params", skip=1)


RNG = np.random.default_rng(0)
LAYERS = {f"layers.{i}.w": RNG.normal(size=(3, 2)) for i in range(4)}
STACKED = [Piece(f"layers.{i}.w", None, (1, 0), ((0, i, i + 1),)) for i in range(4)]
FUSED = {"in_proj": RNG.normal(size=(6, 2))}
SPLIT = [Piece("in_proj", (0, 2 * k, 2 * k + 2), (1, 0), ()) for k in range(3)]


def test_a_stacked_leaf_is_each_layer_transposed_on_a_leading_axis():
    leaf = assemble.leaf(np, STACKED, (4, 2, 3), LAYERS)
    np.testing.assert_array_equal(leaf, np.stack([LAYERS[f"layers.{i}.w"].T for i in range(4)]))


def test_a_fused_tensor_split_into_head_axes_and_read_back():
    # PyTorch's in_proj (3E, E) with E=2 -> three kernels (E, H, D) = (2, 2, 1), q, k, v in order
    leaves = [assemble.leaf(np, [p], (2, 2, 1), FUSED) for p in SPLIT]
    for k, leaf in enumerate(leaves):
        np.testing.assert_array_equal(leaf.reshape(2, 2), FUSED["in_proj"][2 * k : 2 * k + 2].T)
    back = assemble.back([[p] for p in SPLIT], leaves, {"in_proj": (6, 2)})
    np.testing.assert_array_equal(back["in_proj"], FUSED["in_proj"])


@pytest.mark.parametrize(
    ("box", "shape", "index"),
    [
        ((), (8, 4, 2), lambda w, e, d, h: w[h * 4 + d, e]),  # DenseGeneral features=(D, H): (E, D, H)
        ((), (4, 2, 8), lambda w, d, h, e: w[e, h * 4 + d]),  # an output projection's (D, H, E)
        (((0, 1, 2),), (3, 8, 4, 2), lambda w, e, d, h: w[h * 4 + d, e]),  # layer 1 of a stacked leaf
    ],
    ids=["query", "output", "stacked"],
)
def test_heads_last_reads_pytorchs_flat_index_with_the_heads_last_and_back(box, shape, index):
    # PyTorch's index h * D + d (H=2, D=4), read onto head axes whose heads come last
    w = {"w": RNG.normal(size=(8, 8))}
    piece = Piece("w", None, (1, 0), box, heads_last=True)
    made = assemble.leaf(np, [piece], shape, w)
    inner = made[1] if box else made
    for cell in np.ndindex(*inner.shape):
        assert inner[cell] == index(w["w"], *cell)
    full = np.zeros(shape)
    full[assemble.region(shape, box)] = made[assemble.region(shape, box)] if box else made
    np.testing.assert_array_equal(assemble.back([[piece]], [full], {"w": (8, 8)})["w"], w["w"])


def test_a_stacked_leaf_reads_back_in_pytorchs_names_and_layouts():
    leaf = assemble.leaf(np, STACKED, (4, 2, 3), LAYERS)
    back = assemble.back([STACKED], [leaf], {k: v.shape for k, v in LAYERS.items()})
    assert back.keys() == LAYERS.keys()
    for k, v in LAYERS.items():
        np.testing.assert_array_equal(back[k], v)


def test_the_gradient_through_the_pieces_is_each_tensors_own():
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    weights = jnp.arange(12.0).reshape(4, 3)

    def loss(arrays):  # one tensor used twice (tied): its gradient the sum of both uses
        tied = [Piece("w", None, None, ())]
        a = assemble.leaf(jnp, tied, (4, 3), arrays)
        b = assemble.leaf(jnp, [Piece("w", None, (1, 0), ())], (3, 4), arrays)
        return jnp.sum(a * 2.0) + jnp.sum(b * 3.0)

    grad = jax.grad(loss)({"w": weights})["w"]
    np.testing.assert_array_equal(grad, np.full((4, 3), 5.0))


@pytest.mark.parametrize(
    ("boxes", "said"),
    [
        ([((0, 0, 1),), ((0, 1, 2),)], "cover 6 of its 9 entries"),
        ([((0, 0, 2),), ((0, 1, 3),)], "two pieces overlap"),
        ([((0, 0, 2),), ((0, 2, 4),)], "outside its shape"),
        ([(), ((0, 0, 1),)], "whole leaf beside others"),
    ],
    ids=["gap", "overlap", "outside", "whole-and-part"],
)
def test_pieces_that_do_not_tile_their_leaf_are_said(boxes, said):
    assert said in assemble.tiling(J("params/a/kernel", (3, 3)), boxes)


def test_a_leaf_not_made_whole_is_a_problem_of_the_mapping():
    leaf = J("params/layers/w", (4, 2, 3))
    entries = [
        Entry(T(f"layers.{i}.w", (3, 2)), leaf, "transpose", "by test", box=((0, i, i + 1),))
        for i in range(3)
    ]
    table = mapping.Table(tuple(entries))
    (problem,) = table.problems()
    assert problem.startswith("JAX leaf `params/layers/w` (4, 2, 3) is not made whole")
    assert "the mapping has 1 problem" in table.refused()


def test_a_fused_tensor_mapped_in_part_is_a_problem_and_pieces_show_where_in_the_table():
    fused = T("attn.in_proj", (6, 2))
    entries = [
        Entry(fused, J(f"params/attn/{q}/kernel", (2, 2)), "transpose", "by test", take=(0, 2 * k, 2 * k + 2))
        for k, q in enumerate("qk")
    ]
    table = mapping.Table(tuple(entries))
    assert table.problems() == [
        "PyTorch parameter `attn.in_proj` (6, 2) is mapped in part: its pieces cover 8 of its 12 entries"
    ]
    assert "attn.in_proj[2:4] (6, 2) -> params/attn/k/kernel (2, 2)" in str(table)
