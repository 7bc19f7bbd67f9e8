"""Ports that are not one-to-one (``port/fused.py``): a fused PyTorch tensor split into JAX leaves
(``nn.MultiheadAttention``'s ``in_proj_weight``, GPT-2's ``c_attn``), split tensors fused into one leaf
(Llama's q/k/v into ``qkv``, grouped-query attention's smaller k and v), head axes, renamed projections,
tied parameters, layouts found through a class's bases, the overrides that name these; each shown in
the table and refused as ambiguous when it is. Most are pure mapping tests on ``Tensor`` records; the
end-to-end ones run ``examples/port/transformer_linen.py`` and a tied head."""

from __future__ import annotations

import importlib.util

import pytest

import crosscheck
from crosscheck._workloads.port.mapping import fused
from crosscheck._workloads.port.mapping import table as mapping
from crosscheck._workloads.port.mapping.matching import Tensor

needs = {
    name: pytest.mark.skipif(importlib.util.find_spec(name) is None, reason=f"needs {name}")
    for name in ("torch", "flax")
}
E, H, D, EKV = 8, 2, 4, 4


def T(name, shape, module_type="", layout=None, tied=""):
    return Tensor(tuple(name.split(".")), shape, "parameter", module_type, layout, tied=tied)


def J(path, shape, module_type="", layout=None):
    tokens = tuple(path.split("/"))
    return Tensor(tokens, shape, tokens[0], module_type, layout, skip=1)


def P(path, shape):  # a plain pytree's leaf: no collection, no owner
    return Tensor(tuple(path.split("/")), shape, "")


def rows(table):
    return [(e.torch.name, "/".join(e.jax.path), e.transform, e.take, e.box) for e in table.mapped()]


# ---- nn.MultiheadAttention against Flax MultiHeadDotProductAttention ------------------------------------

MHA_TORCH = [
    T("layers.0.self_attn.in_proj_weight", (3 * E, E), "MultiheadAttention"),
    T("layers.0.self_attn.in_proj_bias", (3 * E,), "MultiheadAttention"),
    T("layers.0.self_attn.out_proj.weight", (E, E), "NonDynamicallyQuantizableLinear (a Linear)", "out,in"),
    T("layers.0.self_attn.out_proj.bias", (E,), "NonDynamicallyQuantizableLinear (a Linear)"),
]
MHA_JAX = [
    leaf
    for n in ("query", "key", "value")
    for leaf in (
        J(f"params/layers_0/self_attn/{n}/kernel", (E, H, D), "DenseGeneral", "in,out"),
        J(f"params/layers_0/self_attn/{n}/bias", (H, D), "DenseGeneral"),
    )
] + [
    J("params/layers_0/self_attn/out/kernel", (H, D, E), "DenseGeneral", "in,out"),
    J("params/layers_0/self_attn/out/bias", (E,), "DenseGeneral"),
]


def test_a_fused_in_proj_is_split_in_qkv_order_onto_the_heads():
    table = mapping.build(MHA_TORCH, MHA_JAX)
    assert table.problems() == []
    qkv = "layers.0.self_attn.in_proj_weight"
    assert rows(table)[:3] == [
        (qkv, "params/layers_0/self_attn/query/kernel", "transpose", (0, 0, 8), ()),
        (qkv, "params/layers_0/self_attn/key/kernel", "transpose", (0, 8, 16), ()),
        (qkv, "params/layers_0/self_attn/value/kernel", "transpose", (0, 16, 24), ()),
    ]
    assert [r[3] for r in rows(table)[3:6]] == [(0, 0, 8), (0, 8, 16), (0, 16, 24)]
    assert rows(table)[6] == (
        "layers.0.self_attn.out_proj.weight",
        "params/layers_0/self_attn/out/kernel",
        "transpose",
        None,
        (),
    )
    text = str(table)
    assert (
        "layers.0.self_attn.in_proj_weight[0:8] (24, 8)   -> params/layers_0/self_attn/query/kernel (8, 2, 4)"
        in text
    )
    assert (
        "fused: q of `layers.0.self_attn.in_proj_weight` [0:8]; layout: MultiheadAttention (out,in) -> "
        "DenseGeneral (in,out); head axes (8, 8)->(8, 2, 4)"
    ) in text
    assert (
        "renamed: `layers.0.self_attn.out_proj` is `layers_0/self_attn/out`; layout: "
        "NonDynamicallyQuantizableLinear (a Linear) (out,in) -> DenseGeneral (in,out); "
        "head axes (8, 8)->(2, 4, 8)"
    ) in text


def test_gpt2s_conv1d_c_attn_is_split_along_its_columns():
    torch = [T("h.0.attn.c_attn.weight", (E, 3 * E), "Conv1D"), T("h.0.attn.c_attn.bias", (3 * E,), "Conv1D")]
    jax = [J(f"params/h/0/attn/{n}/kernel", (E, E), "Dense", "in,out") for n in "qkv"]
    jax += [J(f"params/h/0/attn/{n}/bias", (E,), "Dense") for n in "qkv"]
    table = mapping.build(torch, jax)
    assert table.problems() == []
    assert [(r[2], r[3]) for r in rows(table)[:3]] == [("identity", (1, s, s + E)) for s in (0, 8, 16)]
    assert "h.0.attn.c_attn.weight[:, 8:16] (8, 24)" in str(table)
    assert (
        "fused: k of `h.0.attn.c_attn.weight` axis 1 [8:16]; layout: Conv1D (in,out) -> Dense (in,out)"
        in str(table)
    )


LLAMA = [
    T("model.layers.0.self_attn.q_proj.weight", (E, E), "Linear", "out,in"),
    T("model.layers.0.self_attn.k_proj.weight", (EKV, E), "Linear", "out,in"),
    T("model.layers.0.self_attn.v_proj.weight", (EKV, E), "Linear", "out,in"),
]


@pytest.mark.parametrize(
    ("leaf", "boxes"),
    [
        (
            J("params/model/layers_0/self_attn/qkv/kernel", (E, E + 2 * EKV), "Dense", "in,out"),
            [(0, 8), (8, 12), (12, 16)],
        ),
        (P("model/layers/0/self_attn/wqkv", (E, (E + 2 * EKV) // D, D)), [(0, 2), (2, 3), (3, 4)]),
    ],
    ids=["dense-kernel", "plain-heads"],
)
def test_split_projections_fill_a_fused_leaf_with_grouped_query_sizes(leaf, boxes):
    table = mapping.build(LLAMA, [leaf])
    assert table.problems() == []
    assert [(r[2], r[4]) for r in rows(table)] == [("transpose", ((1, s, e),)) for s, e in boxes]
    assert "fused leaf: k at" in str(table)


def test_split_projections_fill_a_leaf_with_an_axis_of_three():
    torch = [T(f"attn.{n}_proj.weight", (E, E), "Linear", "out,in") for n in "qkv"]
    leaf = J("params/attn/qkv/kernel", (E, 3, H, D), "DenseGeneral", "in,out")
    table = mapping.build(torch, [leaf])
    assert table.problems() == []
    assert [r[4] for r in rows(table)] == [((1, 0, 1),), ((1, 1, 2),), ((1, 2, 3),)]
    assert "head axes (8, 8)->(8, 1, 2, 4)" in str(table)


def test_equinox_multihead_attention_keeps_pytorchs_layout():
    names = ("query", "key", "value", "output")
    jax = [Tensor(("mha", f"{n}_proj", "weight"), (E, E), "", "Linear", "out,in") for n in names]
    jax += [Tensor(("mha", f"{n}_proj", "bias"), (E,), "", "Linear") for n in names]
    torch = [
        T("mha.in_proj_weight", (3 * E, E), "MultiheadAttention"),
        T("mha.in_proj_bias", (3 * E,), "MultiheadAttention"),
        T("mha.out_proj.weight", (E, E), "NonDynamicallyQuantizableLinear (a Linear)", "out,in"),
        T("mha.out_proj.bias", (E,)),
    ]
    table = mapping.build(torch, jax)
    assert table.problems() == []
    assert [r[1:4] for r in rows(table)][:3] == [
        (f"mha/{n}_proj/weight", "identity", (0, 8 * i, 8 * i + 8)) for i, n in enumerate(names[:3])
    ]
    assert "renamed: `mha.out_proj` is `mha/output_proj`" in str(table)


@pytest.mark.parametrize(
    ("shape", "target", "fits"),
    [
        ((E, E), (E, H, D), ["identity", "transpose"]),  # square: both regroup, the layouts decide
        ((EKV, E), (E, H // 2, D), ["transpose"]),  # a grouped-query key: only its transpose
        ((E,), (H, D), ["identity"]),  # a bias onto the heads
        ((E, E), (H * D * E,), ["identity", "transpose"]),  # flattened: a join, still a regroup
        ((6, 4), (3, 8), []),  # the entries would mix: not a regroup
    ],
)
def test_head_axes_are_a_regrouping_of_axes(shape, target, fits):
    assert fused.fitting(shape, target) == fits


def test_head_axes_by_name_are_decided_by_the_layouts():
    # a square (E, E) against DenseGeneral's (E, H, D): the layouts say transpose, then the heads split
    torch = [T("attn.q_proj.weight", (E, E), "Linear", "out,in")]
    table = mapping.build(torch, [J("params/attn/q_proj/kernel", (E, H, D), "DenseGeneral", "in,out")])
    assert rows(table) == [("attn.q_proj.weight", "params/attn/q_proj/kernel", "transpose", None, ())]
    assert "by name; layout: Linear (out,in) -> DenseGeneral (in,out); head axes (8, 8)->(8, 2, 4)" in str(
        table
    )


def test_a_square_split_with_unknown_layouts_is_ambiguous_and_says_the_override():
    leaves = [P(f"attn/{n}", (E, E)) for n in "qkv"]
    table = mapping.build([T("attn.in_proj_weight", (3 * E, E), "MultiheadAttention")], leaves)
    problems = table.problems()
    assert len(problems) == 3 and all("is ambiguous" in p for p in problems)
    assert (
        "decide with overrides={'attn.in_proj_weight': [('attn/q', TRANSFORM), ('attn/k', TRANSFORM), "
        "('attn/v', TRANSFORM)]}, TRANSFORM one of 'identity', 'transpose'"
    ) in problems[0]
    override = {
        "attn.in_proj_weight": [("attn/q", "transpose"), ("attn/k", "transpose"), ("attn/v", "transpose")]
    }
    decided = mapping.build([T("attn.in_proj_weight", (3 * E, E), "MultiheadAttention")], leaves, override)
    assert decided.problems() == [] and [r[3] for r in rows(decided)] == [(0, 0, 8), (0, 8, 16), (0, 16, 24)]
    assert "by override: part 2 of `attn.in_proj_weight` [8:16]" in str(decided)


def test_a_square_fuse_with_unknown_layouts_is_ambiguous_and_says_the_box_to_write():
    torch = [T(f"attn.{n}_proj.weight", (E, E)) for n in "qkv"]
    table = mapping.build(torch, [P("attn/wqkv", (E, 3 * E))])
    problems = table.problems()
    assert len(problems) == 3
    assert "overrides={'attn.k_proj.weight': ('attn/wqkv', TRANSFORM, ((1, 8, 16),))}" in problems[1]
    override = {
        f"attn.{n}_proj.weight": ("attn/wqkv", "transpose", ((1, 8 * i, 8 * i + 8),))
        for i, n in enumerate("qkv")
    }
    decided = mapping.build(torch, [P("attn/wqkv", (E, 3 * E))], override)
    assert decided.problems() == [] and [r[4] for r in rows(decided)] == [
        ((1, 0, 8),),
        ((1, 8, 16),),
        ((1, 16, 24),),
    ]


def test_a_split_whose_sizes_do_not_add_up_is_refused_with_the_override():
    leaves = [P("attn/q", (E, E)), P("attn/k", (E, E)), P("attn/v", (E, EKV))]
    table = mapping.build([T("attn.in_proj_weight", (3 * E, E), "MultiheadAttention")], leaves)
    problems = table.problems()
    assert (
        "PyTorch parameter `attn.in_proj_weight` (24, 8) is unmatched: fused: no axis of it splits into"
        in problems[0]
    )
    assert "map it with overrides={'attn.in_proj_weight': [('attn/q', TRANSFORM)" in problems[0]
    assert len(problems) == 4  # and the three leaves, unmatched


def test_a_fused_tensor_whose_parts_the_port_lacks_stays_unmatched():
    # the port has q and k only: the parts cannot be decided, nothing is guessed
    leaves = [P("attn/q", (E, E)), P("attn/k", (E, E))]
    table = mapping.build([T("attn.in_proj_weight", (3 * E, E), "MultiheadAttention")], leaves)
    assert table.mapped() == [] and len(table.problems()) == 3


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({"a.in_proj_weight": {"axis": 2, "parts": ["a/q"]}}, "a split is a list of JAX leaves, or {'axis'"),
        ({"a.in_proj_weight": ["a/q", "a/nope", "a/v"]}, "no JAX leaf `a/nope`"),
        ({"a.in_proj_weight": ["a/q", "a/k"]}, "do not split its axis 0 (24) into parts"),
        ({"a.in_proj_weight": [("a/q", "transpose"), "a/k", ("a/v", (1, 0, 2))]}, "does not turn (8, 8)"),
        (
            {"a.in_proj_weight": ("a/q", "identity", ((0, 0, 9),))},
            "is not ((AXIS, START, STOP), ...) inside (8, 8)",
        ),
    ],
    ids=["bad-axis", "no-leaf", "sizes", "bad-transform", "box-outside"],
)
def test_a_bad_split_or_box_override_is_one_line(override, message):
    leaves = [P(f"a/{n}", (E, E)) for n in "qkv"]
    with pytest.raises(ValueError, match=r"override of `a\.in_proj_weight`") as info:
        mapping.build([T("a.in_proj_weight", (3 * E, E))], leaves, override)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_a_split_override_along_a_given_axis_with_wildcards():
    torch = [T(f"h.{i}.c_attn.weight", (E, 3 * E), "Conv1D") for i in range(2)]
    leaves = [P(f"h_{i}/{n}", (E, E)) for i in range(2) for n in "qkv"]
    parts = [("h_*/q", "identity"), ("h_{1}/k", "identity"), ("h_*/v", "identity")]
    table = mapping.build(torch, leaves, {"h.*.c_attn.weight": {"axis": 1, "parts": parts}})
    assert table.problems() == []
    assert [r[1] for r in rows(table)][3:] == ["h_1/q", "h_1/k", "h_1/v"]
    assert [r[3] for r in rows(table)][3:] == [(1, 0, 8), (1, 8, 16), (1, 16, 24)]
    # a part without its transform, square, the layouts unknown: ambiguous, and the line says what to write
    table = mapping.build(
        torch, leaves, {"h.*.c_attn.weight": {"axis": 1, "parts": ["h_*/q", "h_*/k", "h_*/v"]}}
    )
    assert "is ambiguous: by override: part 1 of `h.0.c_attn.weight` axis 1 [0:8]" in table.problems()[0]
    assert "say it: ('h_0/q', TRANSFORM), TRANSFORM one of 'identity', 'transpose'" in table.problems()[0]


# ---- Tied parameters --------------------------------------------------------------------------------

TIED = [
    T("wte.weight", (16, E), "Embedding", "rows"),
    T("lm_head.weight", (16, E), "Linear", "out,in", tied="wte.weight"),
]


def test_a_tied_head_on_a_leaf_of_its_own_is_refused_as_untied_with_the_override_to_accept_it():
    jax = [
        J("params/wte/embedding", (16, E), "Embed", "rows"),
        J("params/lm_head/kernel", (E, 16), "Dense", "in,out"),
    ]
    (problem,) = mapping.build(TIED, jax).problems()
    assert problem.startswith(
        "PyTorch ties `lm_head.weight` to `wte.weight` (one tensor) and the port gives it a leaf of its "
        "own, `params/lm_head/kernel`: the port unties them"
    )
    assert problem.endswith("accept it with overrides={'lm_head.weight': 'params/lm_head/kernel'}")
    table = mapping.build(TIED, jax, {"lm_head.weight": "params/lm_head/kernel"})
    assert table.problems() == []
    assert "tied: `lm_head.weight` is `wte.weight`; the port unties them, accepted by override" in str(table)


def test_a_tied_head_reaches_its_own_leaf_as_a_second_row():
    jax = [
        J("params/wte/embedding", (16, E), "Embed", "rows"),
        J("params/lm_head/kernel", (E, 16), "Dense", "in,out"),
    ]
    table = mapping.build(TIED, jax)
    assert len(table.problems()) == 1  # untied: refused (above), the rows still shown
    assert rows(table) == [
        ("wte.weight", "params/wte/embedding", "identity", None, ()),
        ("wte.weight", "params/lm_head/kernel", "transpose", None, ()),
    ]
    assert (
        "tied: `lm_head.weight` is `wte.weight`; by name; layout: Linear (out,in) -> Dense (in,out)"
        in str(table)
    )


def test_a_tied_head_the_port_computes_from_the_embedding_adds_no_row():
    table = mapping.build(TIED, [J("params/wte/embedding", (16, E), "Embed", "rows")])
    assert table.problems() == [] and len(table.entries) == 1


# ---- Layouts through the class's bases (PyTorch, Flax) -------------------------------------------------


@needs["torch"]
def test_multihead_attentions_out_proj_has_linears_layout():
    from torch import nn

    from crosscheck._workloads.port.sides import torch_side

    described, _ = torch_side.tensors(nn.MultiheadAttention(E, H))
    out = next(t for t in described if t.name == "out_proj.weight")
    assert (out.module_type, out.layout) == ("NonDynamicallyQuantizableLinear (a Linear)", "out,in")
    # a square out_proj against a Dense of its name: the layouts decide (ambiguous before)
    table = mapping.build([out], [J("params/out_proj/kernel", (E, E), "Dense", "in,out")])
    assert rows(table) == [("out_proj.weight", "params/out_proj/kernel", "transpose", None, ())]


@needs["torch"]
def test_a_tied_alias_is_described_with_the_tensor_it_is():
    from torch import nn

    from crosscheck._workloads.port.sides import torch_side

    model = nn.ModuleDict({"wte": nn.Embedding(16, E), "lm_head": nn.Linear(E, 16, bias=False)})
    model["lm_head"].weight = model["wte"].weight
    described, values = torch_side.tensors(model)
    assert [(t.name, t.tied) for t in described] == [("wte.weight", ""), ("lm_head.weight", "wte.weight")]
    assert list(values) == ["wte.weight"]


@needs["flax"]
def test_a_subclass_of_flax_dense_has_denses_layout():
    import flax.linen as nn
    import jax.numpy as jnp

    from crosscheck._workloads.port.sides.jax_side import JaxSide

    class MyDense(nn.Dense):
        pass

    class Net(nn.Module):
        @nn.compact
        def __call__(self, x):
            return MyDense(E, name="fc")(x)

    side = JaxSide(Net(), None, None, {"x": jnp.zeros((2, E))})
    kernel = next(t for t in side.leaves if t.path[-1] == "kernel")
    assert (kernel.module_type, kernel.layout) == ("MyDense (a Dense)", "in,out")


def test_the_verdict_names_the_module_around_projections_without_a_counterpart():
    import numpy as np

    from crosscheck._workloads.port.judge.verdict import forward_origin
    from crosscheck._workloads.port.sides.torch_side import ModuleCall

    def record(name, i):
        return ModuleCall(name, "Linear", (np.full(2, i),), (np.full(2, i + 0.5),))

    names = ("attn.q_proj", "attn.k_proj", "attn.v_proj", "attn.o_proj", "attn", "")
    order = [record(n, i) for i, n in enumerate(names)]
    paired = {n: n for n in names[3:]}
    outputs = dict.fromkeys(names[3:], False)
    inputs = {"attn.o_proj": False, "attn": True, "": True}
    verdict = forward_origin(order, paired, outputs, inputs, "Net")
    assert (verdict.module, verdict.first, verdict.suspects) == ("attn", "attn.o_proj", names[:3])
    assert verdict.text.startswith(
        "the forward pass differs first in the code of `attn` before `attn.o_proj`"
    )
    inputs["attn"] = False  # the attention's input differs too: the top module's code, as before
    assert forward_origin(order, paired, outputs, inputs, "Net").module == ""


# ---- End to end -----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def transformer():
    pytest.importorskip("flax")
    pytest.importorskip("torch")
    from examples.port import transformer_linen

    return transformer_linen


@needs["flax"]
def test_the_transformer_encoder_maps_with_no_override_and_passes(transformer):
    port = transformer.port
    assert port.overrides is None or not port.overrides
    assert port.mapping.problems() == []
    report = crosscheck.run(workload=port, reference="torch", backends=["jax"])
    assert report.passed, report.problems
    assert report.backends["jax"].notes["port"]["starts_in"] == "nowhere"


@needs["flax"]
def test_queries_and_keys_swapped_fail_at_the_attention(transformer):
    report = crosscheck.run(workload=transformer.swapped_qk, reference="torch", backends=["jax"])
    verdict = report.backends["jax"].notes["port"]
    assert not report.passed
    assert (verdict["starts_in"], verdict["module"]) == ("forward", "layers.0.self_attn")


def _tied_torch():
    import torch
    from torch import nn

    class LM(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.wte, self.lm_head = nn.Embedding(16, E), nn.Linear(E, 16, bias=False)
            self.lm_head.weight = self.wte.weight

        def forward(self, x):
            return self.lm_head(torch.tanh(self.wte(x)))

    torch.manual_seed(0)
    return LM().eval()


def _tied_flax(own_head):
    import flax.linen as nn
    import jax.numpy as jnp

    class LM(nn.Module):
        @nn.compact
        def __call__(self, x):
            wte = nn.Embed(16, E, name="wte")
            h = jnp.tanh(wte(x))
            return nn.Dense(16, use_bias=False, name="lm_head")(h) if own_head else wte.attend(h)

    return LM()


@needs["flax"]
@pytest.mark.parametrize("own_head", [True, False], ids=["own-head-leaf", "embed-attend"])
def test_a_tied_head_passes_its_gradient_the_sum_of_both_uses(own_head):
    port = crosscheck.Port(
        name="tied",
        torch=_tied_torch(),
        jax=_tied_flax(own_head),
        inputs=lambda rng, dtype: {"x": rng.integers(0, 16, (2, 5))},
        overrides={"lm_head.weight": "params/lm_head/kernel"} if own_head else None,  # untied: accepted
    )
    assert port.mapping.problems() == []
    assert len(port.mapping.mapped()) == (2 if own_head else 1)
    report = crosscheck.run(workload=port, reference="torch", backends=["jax"], dtype="float64")
    assert report.passed, report.problems
    assert [c.parameter for c in report.comparisons if "output" not in c.parameter] == ["wte.weight"]


HQ, HKV = 2, 1  # grouped-query attention: one key and value head for two query heads


def _gqa_torch():
    import torch
    from torch import nn

    class Attention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.q_proj = nn.Linear(E, HQ * D, bias=False)
            self.k_proj, self.v_proj = (nn.Linear(E, HKV * D, bias=False) for _ in range(2))
            self.o_proj = nn.Linear(HQ * D, E, bias=False)

        def forward(self, x):
            b, s, _ = x.shape
            q = self.q_proj(x).view(b, s, HQ, D).transpose(1, 2)
            k, v = (
                f(x).view(b, s, HKV, D).transpose(1, 2).repeat_interleave(HQ // HKV, 1)
                for f in (self.k_proj, self.v_proj)
            )
            y = torch.softmax(q @ k.transpose(-1, -2) / D**0.5, -1) @ v
            return self.o_proj(y.transpose(1, 2).reshape(b, s, HQ * D))

    torch.manual_seed(0)
    return nn.ModuleDict({"self_attn": Attention()}).eval()


def _gqa_flax(swap_kv=False):
    import flax.linen as nn
    import jax
    import jax.numpy as jnp

    class Attention(nn.Module):
        @nn.compact
        def __call__(self, x):
            qkv = nn.DenseGeneral((HQ + 2 * HKV, D), use_bias=False, name="qkv")(x)
            q, k, v = qkv[..., :HQ, :], qkv[..., HQ : HQ + HKV, :], qkv[..., HQ + HKV :, :]
            k, v = (v, k) if swap_kv else (k, v)  # a planted bug: the fused leaf read in the wrong order
            k, v = jnp.repeat(k, HQ // HKV, axis=-2), jnp.repeat(v, HQ // HKV, axis=-2)
            weights = jax.nn.softmax(jnp.einsum("bqhd,bkhd->bhqk", q, k) / D**0.5, -1)
            y = jnp.einsum("bhqk,bkhd->bqhd", weights, v)
            return nn.DenseGeneral(E, axis=(-2, -1), use_bias=False, name="o_proj")(y)

    class Net(nn.Module):
        @nn.compact
        def __call__(self, x):
            return Attention(name="self_attn")(x)

    return Net()


@needs["flax"]
@pytest.mark.parametrize("swap_kv", [False, True], ids=["healthy", "keys-and-values-swapped"])
def test_grouped_query_projections_fused_into_one_leaf(swap_kv):
    port = crosscheck.Port(
        name="gqa-fused",
        torch=_gqa_torch(),
        jax=_gqa_flax(swap_kv),
        inputs=lambda rng, dtype: {"x": rng.standard_normal((2, 3, E)).astype(dtype)},
        torch_call=lambda module, inputs: module["self_attn"](inputs["x"]),
    )
    assert port.mapping.problems() == []
    assert [e.box for e in port.mapping.mapped()][:3] == [((1, 0, 2),), ((1, 2, 3),), ((1, 3, 4),)]
    report = crosscheck.run(workload=port, reference="torch", backends=["jax"], dtype="float64")
    assert report.passed is not swap_kv, report.problems
    if swap_kv:
        assert report.backends["jax"].notes["port"]["module"] == "self_attn"
