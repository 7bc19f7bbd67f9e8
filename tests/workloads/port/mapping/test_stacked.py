"""Stacked layers: one JAX leaf ``(L, ...)`` for the ``L`` PyTorch tensors ``layers.{i}.X`` (a scanned
port), mapped without an override, refused where it is ambiguous, named by overrides; and a scanned
port's verdict naming the layer and module that differs (linen ``nn.scan`` + ``nn.remat``, ``nnx.scan``,
Equinox ``filter_vmap`` + ``lax.scan`` with stacked ``jax_intermediates``)."""

from __future__ import annotations

import numpy as np
import pytest

from crosscheck._workloads.port.mapping import assemble, stacked
from crosscheck._workloads.port.mapping import table as mapping
from crosscheck._workloads.port.mapping.matching import Tensor


def T(name, shape, module_type="", layout=None):
    return Tensor(tuple(name.split(".")), shape, "parameter", module_type, layout)


def J(path, shape, module_type="", layout=None, kind=None):
    tokens = tuple(path.split("/"))
    return Tensor(
        tokens, shape, tokens[0] if kind is None else kind, module_type, layout, skip=int(kind is None)
    )


def LINEAR(n=4, d=6, prefix="layers"):
    """PyTorch's ``layers.{i}.linear`` (``nn.Linear``) for ``n`` layers."""
    return [
        T(f"{prefix}.{i}.linear.{leaf}", shape, "Linear", "out,in" if leaf == "weight" else None)
        for i in range(n)
        for leaf, shape in (("weight", (d, d)), ("bias", (d,)))
    ]


def DENSE(n=4, d=6, path="params/layers/linear"):
    """A linen ``nn.scan`` over ``nn.Dense``: the layers on the leading axis of each leaf."""
    return [J(f"{path}/kernel", (n, d, d), "Dense", "in,out"), J(f"{path}/bias", (n, d))]


# ---- The mapping -----------------------------------------------------------------------------------------


def test_a_scanned_dense_maps_each_layer_onto_its_slice_of_the_stacked_leaf():
    table = mapping.build(LINEAR(), DENSE())
    assert table.problems() == []
    rows = {r["torch"]: r for r in table.rows()}
    row = rows["layers.2.linear.weight"]
    assert (row["jax"], row["transform"], row["box"]) == (
        "params/layers/linear/kernel",
        "transpose",
        [[0, 2, 3]],
    )
    assert row["how"] == "by name; layout: Linear (out,in) -> Dense (in,out); stacked: layer 2 of 4 on axis 0"
    assert rows["layers.3.linear.bias"]["how"].endswith("stacked: layer 3 of 4 on axis 0")
    assert "layers.2.linear.weight (6, 6) -> params/layers/linear/kernel[2] (4, 6, 6)  transpose" in str(
        table
    )


def test_the_stacked_leaf_is_built_from_the_layers_in_order():
    table = mapping.build(LINEAR(d=3), DENSE(d=3))
    rng = np.random.default_rng(0)
    arrays = {e.torch.name: rng.standard_normal(e.torch.shape) for e in table.entries}
    kernel = [e for e in table.mapped() if e.jax.path[-1] == "kernel"]
    built = assemble.leaf(np, [assemble.Piece.of(e) for e in kernel], (4, 3, 3), arrays)
    for i in range(4):
        np.testing.assert_array_equal(built[i], arrays[f"layers.{i}.linear.weight"].T)
    back = assemble.back(
        [[assemble.Piece.of(e) for e in kernel]], [built], {e.torch.name: e.torch.shape for e in kernel}
    )
    np.testing.assert_array_equal(back["layers.1.linear.weight"], arrays["layers.1.linear.weight"])


@pytest.mark.parametrize(
    ("jax", "transform"),
    [
        ([J("layers/linear/weight", (4, 6, 6), "Linear", "out,in", kind="")], "identity"),  # Equinox
        ([J("layers/linear/kernel", (4, 6, 6), "Linear", "in,out", kind="params")], "transpose"),  # nnx
        ([J("params/encoder/ScanBlock_0/linear/kernel", (4, 6, 6), "Dense", "in,out")], "transpose"),
    ],
    ids=["equinox", "nnx", "scan-module-in-place-of-the-index"],
)
def test_the_index_goes_where_the_pytorch_list_has_it(jax, transform):
    prefix = "encoder" if "encoder" in jax[0].path else "layers"
    torch = [t for t in LINEAR(prefix=prefix) if t.path[-1] == "weight"]
    if prefix == "encoder":
        torch = [T(f"encoder.{i}.linear.weight", (6, 6), "Linear", "out,in") for i in range(4)]
    table = mapping.build(torch, jax)
    assert table.problems() == [] and {e.transform for e in table.entries} == {transform}
    assert [e.box for e in table.entries] == [((0, i, i + 1),) for i in range(4)]


def test_an_unnamed_linen_scan_reads_as_the_pytorch_list_of_its_parent():
    table = mapping.build(LINEAR(), DENSE(path="params/ScanCheckpointLayer_0/linear"))
    assert table.problems() == []
    assert table.entries[4].how == (
        "by name; layout: Linear (out,in) -> Dense (in,out); stacked: layer 2 of 4 on axis 0 "
        "(`ScanCheckpointLayer_0` read as `layers`)"
    )
    pairs = stacked.module_pairs(table.mapped())
    assert (pairs["layers.2"], pairs["layers.2.linear"]) == (
        "ScanCheckpointLayer_0@2",
        "ScanCheckpointLayer_0.linear@2",
    )


def test_an_unnamed_scan_that_fits_two_lists_of_its_parent_is_refused_with_the_override_to_write():
    torch = LINEAR() + [T(f"blocks.{i}.linear.bias", (6,)) for i in range(4)]
    table = mapping.build(torch, DENSE(path="params/ScanLayer_0/linear"))
    assert table.problems()[0] == (
        "PyTorch parameter `layers.0.linear.bias` (6,) is unmatched: ambiguous: "
        "`params/ScanLayer_0/linear/bias` (4, 6) reads as the 4 layers of `layers.*.linear.bias` or as "
        "`blocks.*.linear.bias`; choose with "
        "overrides={'layers.*.linear.bias': ('params/ScanLayer_0/linear/bias', 'stacked')}"
    )
    chosen = {"blocks.*.linear.bias": ("params/ScanLayer_0/linear/bias", "stacked")}
    table = mapping.build(torch, DENSE(path="params/ScanLayer_0/linear"), chosen)
    rows = {e.torch.name: e for e in table.entries if e.torch is not None}
    assert rows["blocks.1.linear.bias"].box == ((0, 1, 2),) and rows["layers.1.linear.bias"].jax is None


def test_a_one_to_one_list_maps_as_before():
    jax = [J(f"params/layers_{i}/linear/kernel", (6, 6), "Dense", "in,out") for i in range(4)]
    jax += [J(f"params/layers_{i}/linear/bias", (6,)) for i in range(4)]
    table = mapping.build(LINEAR(), jax)
    assert table.problems() == [] and all(not e.box and "stacked" not in e.how for e in table.entries)


def test_a_leading_axis_of_another_length_is_not_read_as_the_layers():
    table = mapping.build(LINEAR(n=3), DENSE(n=4))
    assert len(table.problems()) == 8  # 6 tensors and 2 leaves unmatched, as before
    assert all(not e.box for e in table.entries)


def test_a_square_stacked_kernel_without_layouts_is_ambiguous_with_the_override_to_write():
    torch = [T(f"layers.{i}.w", (6, 6)) for i in range(4)]
    table = mapping.build(torch, [J("params/layers/w", (4, 6, 6))])
    problems = table.problems()
    assert len(problems) == 4
    assert problems[2] == (
        "`layers.2.w` (6, 6) -> `params/layers/w` (4, 6, 6) is ambiguous: by name; identity and transpose "
        "both fit the shapes; stacked: layer 2 of 4 on axis 0; decide with overrides={'layers.*.w': "
        "('params/layers/w', TRANSFORM, 'stacked')}, TRANSFORM one of 'identity', 'transpose'"
    )
    decided = mapping.build(
        torch, [J("params/layers/w", (4, 6, 6))], {"layers.*.w": ("params/layers/w", "transpose", "stacked")}
    )
    assert decided.problems() == [] and {e.transform for e in decided.entries} == {"transpose"}
    assert decided.entries[1].how == "by override; stacked: layer 1 of 4 on axis 0"


def _suggested(problem: str, transform: str) -> dict:
    """The override a problem line says to write, as a user pastes it (TRANSFORM chosen)."""
    import ast
    import re

    found = re.search(r"overrides=(\{.*?\)\})", problem)
    assert found, problem
    return ast.literal_eval(found.group(1).replace("TRANSFORM", repr(transform)))


O_PROJ = [T(f"model.layers.{i}.self_attn.o_proj.weight", (32, 32), "Linear", "out,in") for i in range(2)]
O_KERNEL = [J("model/layers/self_attn/o_proj/kernel", (2, 4, 8, 32), "LinearGeneral", kind="params")]


def test_the_override_suggested_for_a_square_kernel_onto_stacked_head_axes_is_accepted_when_pasted():
    """A square ``o_proj`` (E, E) onto a stacked ``(L, H, D, E)``: each override the line says is one
    that is accepted when pasted, and the leaf it builds holds each layer's kernel, heads split."""
    problems = mapping.build(O_PROJ, O_KERNEL).problems()
    assert len(problems) == 2 and all("/0/" not in p and "/1/" not in p for p in problems)
    overrides = _suggested(problems[1], "transpose")
    assert overrides == {
        "model.layers.*.self_attn.o_proj.weight": (
            "model/layers/self_attn/o_proj/kernel",
            "transpose",
            "stacked",
        )
    }
    table = mapping.build(O_PROJ, O_KERNEL, overrides)
    assert table.problems() == []
    rng = np.random.default_rng(0)
    arrays = {t.name: rng.standard_normal(t.shape) for t in O_PROJ}
    built = assemble.leaf(np, [assemble.Piece.of(e) for e in table.mapped()], (2, 4, 8, 32), arrays)
    for i in range(2):
        np.testing.assert_array_equal(
            built[i], arrays[f"model.layers.{i}.self_attn.o_proj.weight"].T.reshape(4, 8, 32)
        )


def test_a_stacked_override_takes_a_box_inside_the_layer():
    """``(PATH, TRANSFORM, box, 'stacked')``: each layer's ``q`` and ``k`` (E, E) fill their heads of
    that layer of a fused stacked ``(L, E, 2H, D)``, the box given inside one layer."""
    torch = [T(f"layers.{i}.{n}.weight", (32, 32)) for i in range(2) for n in ("q", "k")]
    leaf = "params/layers/qk/kernel"
    overrides = {
        "layers.*.q.weight": (leaf, "transpose", ((1, 0, 4),), "stacked"),
        "layers.*.k.weight": (leaf, "transpose", ((1, 4, 8),), "stacked"),
    }
    table = mapping.build(torch, [J(leaf, (2, 32, 8, 8))], overrides)
    assert table.problems() == []
    assert [e.box for e in table.entries] == [
        ((0, i, i + 1), (2, s, s + 4)) for i in range(2) for s in (0, 4)
    ]
    assert table.entries[3].how.endswith("stacked: layer 1 of 2 on axis 0")
    rng = np.random.default_rng(0)
    arrays = {t.name: rng.standard_normal(t.shape) for t in torch}
    built = assemble.leaf(np, [assemble.Piece.of(e) for e in table.mapped()], (2, 32, 8, 8), arrays)
    np.testing.assert_array_equal(built[1, :, 4:], arrays["layers.1.k.weight"].T.reshape(32, 4, 8))


def test_an_ambiguous_fused_stacked_row_suggests_the_stacked_override_with_its_box():
    torch = [T(f"layers.{i}.{n}_proj.weight", (32, 32)) for i in range(2) for n in ("q", "k", "v")]
    jax = [J("params/layers/qkv_proj/kernel", (2, 32, 12, 8))]
    problems = mapping.build(torch, jax).problems()
    lines = [p for p in problems if p.startswith("`layers.1.k_proj.weight`")]
    assert lines, problems
    overrides = _suggested(lines[0], "transpose")
    assert overrides == {
        "layers.*.k_proj.weight": ("params/layers/qkv_proj/kernel", "transpose", ((1, 4, 8),), "stacked")
    }
    assert "/1/" not in lines[0]
    decided = mapping.build(torch, jax, overrides)
    assert not [p for p in decided.problems() if "k_proj" in p]


def test_a_nested_scan_is_refused_naming_convert_and_the_overrides_that_map_it():
    """Layers scanned inside a scan: one leaf ``(L1, L2, ...)``; the refusal says so, names
    ``convert=``, and the overrides it says (one per inner layer) are accepted when written."""
    torch = [
        T(f"blocks.{i}.layers.{j}.linear.weight", (6, 6), "Linear", "out,in")
        for i in range(2)
        for j in range(3)
    ]
    jax = [J("params/blocks/layers/linear/kernel", (2, 3, 6, 6), "Dense", "in,out")]
    line = mapping.build(torch, jax).problems()[-1]
    assert "layers scanned inside a scan (nested)" in line and "convert=fn" in line, line
    overrides = {}
    for j in range(3):  # J and NAME filled in, as the user writes them
        filled = line.replace("J + 1", str(j + 1)).replace("(0, J,", f"(0, {j},").replace(".J.", f".{j}.")
        overrides.update(_suggested(filled.replace("NAME", "linear.weight"), "transpose"))
    assert len(overrides) == 3
    assert mapping.build(torch, jax, overrides).problems() == []


def test_a_leaf_that_reads_as_two_module_lists_is_refused_with_the_override_to_write():
    torch = [T(f"h.{i}.h.w", (8,)) for i in range(2)] + [T(f"h.{i}.w", (8,)) for i in range(2)]
    table = mapping.build(torch, [J("params/h/h/w", (2, 8))])
    assert all(not e.box for e in table.entries)
    assert table.problems()[0] == (
        "PyTorch parameter `h.0.h.w` (8,) is unmatched: ambiguous: `params/h/h/w` (2, 8) reads as the 2 "
        "layers of `h.*.h.w` or as `h.*.w`; choose with overrides={'h.*.h.w': ('params/h/h/w', 'stacked')}"
    )
    chosen = mapping.build(torch, [J("params/h/h/w", (2, 8))], {"h.*.h.w": ("params/h/h/w", "stacked")})
    assert [e.status for e in chosen.entries[:2]] == ["mapped", "mapped"]


def test_an_override_stacks_a_leaf_name_matching_does_not_reach():
    torch = [T(f"blocks.{i}.fc.weight", (6, 4), "Linear", "out,in") for i in range(3)]
    jax = [J("params/scanned/dense/kernel", (3, 4, 6), "Dense", "in,out")]
    assert len(mapping.build(torch, jax).problems()) == 4
    table = mapping.build(torch, jax, {"blocks.*.fc.weight": ("params/scanned/dense/kernel", "stacked")})
    assert table.problems() == []
    assert [e.box for e in table.entries] == [((0, i, i + 1),) for i in range(3)]
    assert (
        table.entries[0].how
        == "by override; layout: Linear (out,in) -> Dense (in,out); stacked: layer 0 of 3 on axis 0"
    )


BAD_OVERRIDES = [
    ("no-wildcard", {"layers.0.linear.weight": ("params/layers/linear/kernel", "stacked")},
     r"`stacked` takes the layer index from the pattern's first `\*`, found none"),
    ("not-an-index", {"*.0.linear.weight": ("params/layers/linear/kernel", "stacked")},
     r"found 'layers'; write the layer's index as `\*`"),
    ("no-leaf", {"layers.*.linear.weight": ("params/layers/kernel", "stacked")},
     r"no JAX leaf `params/layers/kernel`"),
    ("past-the-axis", {"layers.*.linear.bias": ("params/layers/linear/bias", "stacked")},
     r"`params/layers/linear/bias` \(2, 6\) has no layer 2 on its leading axis"),
    ("shape", {"layers.*.linear.weight": ("params/layers/linear/bias", "stacked")},
     r"no transform turns \(6, 6\) into \(6,\), layer 0 of `params/layers/linear/bias` \(2, 6\)\.$"),
    ("transform", {"layers.*.linear.weight": ("params/layers/linear/kernel", "OIHW->HWIO", "stacked")},
     r"`OIHW->HWIO` does not apply to \(6, 6\) .* \(layer 0 of `params/layers/linear/kernel` "
     r"\(4, 6, 6\)\)\.$"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("overrides", "message"), [c[1:] for c in BAD_OVERRIDES], ids=[c[0] for c in BAD_OVERRIDES]
)
def test_a_stacked_override_that_does_not_fit_is_one_line(overrides, message):
    jax = [*DENSE()[:1], J("params/layers/linear/bias", (2, 6))]
    with pytest.raises(ValueError, match=message) as raised:
        mapping.build(LINEAR(), jax, overrides)
    assert "\n" not in str(raised.value)


def test_a_stacked_layer_pairs_with_the_jax_modules_call_of_its_index():
    pairs = stacked.module_pairs(mapping.build(LINEAR(), DENSE()).mapped())
    assert pairs["layers.0.linear"] == "layers.linear@0" and pairs["layers.0"] == "layers@0"
    assert pairs["layers.2.linear"] == "layers.linear@2" and pairs["layers.2"] == "layers@2"


def test_a_stacked_intermediate_is_spread_into_one_record_per_layer():
    spread = stacked.spread("layers.*.linear", np.arange(12).reshape(3, 4))
    assert [name for name, _ in spread] == ["layers.0.linear", "layers.1.linear", "layers.2.linear"]
    np.testing.assert_array_equal(spread[2][1], [8, 9, 10, 11])
    assert stacked.spread("fc1", 5) == [("fc1", 5)]


# ---- Scanned ports, end to end ---------------------------------------------------------------------------

KINDS = {"linen": "flax", "linen-unnamed": "flax", "nnx": "flax", "equinox": "equinox"}


@pytest.fixture(params=list(KINDS))
def kind(request):
    pytest.importorskip("torch")
    pytest.importorskip(KINDS[request.param])
    return request.param


def test_a_healthy_scanned_port_maps_without_override_and_passes_module_by_module(kind):
    import scanned

    port = scanned.port(kind)
    rows = port.mapping.rows()
    assert len(rows) == 2 * scanned.L and all(r["status"] == "mapped" and r["box"] for r in rows)
    report, verdict = scanned.verdict(port)
    assert report.passed, report.problems
    assert verdict["starts_in"] == "nowhere"
    outputs = {c.parameter for c in report.comparisons if "(output)" in (c.parameter or "")}
    assert {f"layers.{i}.linear (output)" for i in range(scanned.L)} <= outputs  # each layer compared


@pytest.mark.parametrize(
    ("bug", "module"),
    [({"bug_layer": 2}, "layers.2.linear"), ({"bug_layer": "all"}, "layers.0.linear")],
    ids=["a-bug-in-layer-2", "a-bug-in-every-layer"],
)
def test_a_planted_bug_in_a_scanned_port_names_its_layer(kind, bug, module):
    import scanned

    report, verdict = scanned.verdict(scanned.port(kind, **bug))
    assert not report.passed
    assert (verdict["starts_in"], verdict["module"]) == ("forward", module), verdict["text"]


def test_layers_scanned_in_the_wrong_order_are_the_top_modules_code_not_a_layers(kind):
    """Each layer's module computes PyTorch's layer from its input: what differs is which input, the
    order the top module runs them in (a listed intermediate has no input to say so: its first layer)."""
    import scanned

    report, verdict = scanned.verdict(scanned.port(kind, reverse=True))
    assert not report.passed
    if kind == "equinox":
        assert (verdict["starts_in"], verdict["module"]) == ("forward", "layers.0.linear"), verdict["text"]
    else:
        assert verdict["starts_in"] == "forward" and not verdict["module"], verdict["text"]
        assert "in the code of the top module (Stack) before `layers.0.linear`" in verdict["text"]


SCANS = {"a-step-calling-its-linear-twice": {"twice": True}, "a-reversed-scan": {"backwards": True}}


@pytest.mark.parametrize("kind_", ["linen", "nnx"])
@pytest.mark.parametrize("how", list(SCANS.values()), ids=list(SCANS))
def test_scan_steps_pair_with_the_layer_of_their_index_not_their_call_order(kind_, how):
    """A step that calls a submodule twice calls back twice; a reversed scan runs its last layer
    first: the k-th call back is not layer k - 1. Healthy, every layer's every call is compared with
    its own and none is said to be cut differently."""
    pytest.importorskip("torch")
    pytest.importorskip("flax")
    import scanned

    report, verdict = scanned.verdict(scanned.port(kind_, **how))
    assert report.passed, report.problems
    assert verdict["starts_in"] == "nowhere" and "cut their modules differently" not in verdict["text"]
    outputs = {c.parameter for c in report.comparisons if "(output)" in (c.parameter or "")}
    calls = ["", "#2"] if how.get("twice") else [""]
    assert {f"layers.{i}.linear{c} (output)" for i in range(scanned.L) for c in calls} <= outputs
    assert not [c.parameter for c in report.comparisons if c.status == "boundary"]


@pytest.mark.parametrize("kind_", ["linen", "nnx"])
@pytest.mark.parametrize(
    ("how", "bug", "module"),
    [
        ({"twice": True}, 3, "layers.3.linear"),
        ({"backwards": True}, 2, "layers.2.linear"),
        ({"twice": True}, "all", "layers.0.linear"),
    ],
    ids=[*SCANS, "every-layer-of-a-step-calling-twice"],
)
def test_a_bug_in_a_layer_of_such_a_scan_is_blamed_on_that_layer(kind_, how, bug, module):
    pytest.importorskip("torch")
    pytest.importorskip("flax")
    import scanned

    report, verdict = scanned.verdict(scanned.port(kind_, bug_layer=bug, **how))
    assert not report.passed
    assert (verdict["starts_in"], verdict["module"]) == ("forward", module), verdict["text"]


def _stacking(sd):
    """A team's conversion of the scanned nnx port: each layer's tensors stacked by hand."""
    import jax.numpy as jnp
    import scanned

    layers = range(scanned.L)
    return {
        "layers": {
            "linear": {
                "kernel": jnp.stack([sd[f"layers.{i}.linear.weight"].T for i in layers]),
                "bias": jnp.stack([sd[f"layers.{i}.linear.bias"] for i in layers]),
            }
        }
    }


@pytest.mark.parametrize(
    ("how", "module"),
    [({}, None), ({"bug_layer": 2}, "layers.2.linear"), ({"bug_layer": 3, "twice": True}, "layers.3.linear")],
    ids=["healthy", "a-bug-in-layer-2", "a-bug-in-layer-3-of-a-step-calling-twice"],
)
def test_a_scanned_nnx_port_through_convert_compares_each_layer_and_blames_its_own(how, module):
    """Through ``convert=``, a leaf that stacks a module list's layers pairs each layer with the
    scan's step of its index, as the automatic mapping does: each layer's modules are compared."""
    pytest.importorskip("torch")
    pytest.importorskip("flax")
    import scanned

    report, verdict = scanned.verdict(scanned.port("nnx", convert=_stacking, **how))
    outputs = {c.parameter for c in report.comparisons if "(output)" in (c.parameter or "")}
    assert {f"layers.{i}.linear (output)" for i in range(scanned.L)} <= outputs
    if module is None:
        assert report.passed and verdict["starts_in"] == "nowhere", report.problems
    else:
        assert not report.passed
        assert (verdict["starts_in"], verdict["module"]) == ("forward", module), verdict["text"]


@pytest.mark.parametrize("kind_", ["linen", "nnx"])
def test_a_stacked_kernel_not_transposed_names_the_first_layer(kind_):
    pytest.importorskip("flax")
    import scanned

    path = {"linen": "params/layers/linear/kernel", "nnx": "layers/linear/kernel"}[kind_]
    port = scanned.port(kind_, overrides={"layers.*.linear.weight": (path, "identity", "stacked")})
    report, verdict = scanned.verdict(port)
    assert not report.passed
    assert (verdict["starts_in"], verdict["module"]) == ("forward", "layers.0.linear"), verdict["text"]


def test_a_scanned_linen_port_passes_against_the_oracle_in_float64():
    pytest.importorskip("flax")
    import scanned

    report, verdict = scanned.verdict(scanned.port("linen"), dtype="float64", reference="numpy-fd")
    assert report.passed, report.problems
    assert verdict["starts_in"] == "nowhere"


@pytest.mark.parametrize(
    ("listed", "returned", "message"),
    [
        (("layers.*.linear",), lambda a: a[:3],
         r"`layers.\*.linear` has shape \(3, 3, 6\) on the JAX side, its leading axis the layers; "
         r"PyTorch has 4 modules `layers.0.linear` to `layers.3.linear`\.$"),
        (("layers.*.linear",), lambda a: a[:, :, :2],
         r"`layers.\*.linear` has shape \(4, 3, 2\) on the JAX side, layer layers.0.linear: \(3, 2\); "
         r"PyTorch's `layers.0.linear` \(Linear\) outputs \(3, 6\)\.$"),
        (("blocks.*.linear",), lambda a: a,
         r"`blocks.\*.linear` stands for PyTorch modules numbered 0 to L-1"),
        (("layers.*.*",), lambda a: a, r"`layers.\*.\*` has 2 `\*`"),
    ],
    ids=["leading-length", "layer-shape", "no-module", "two-wildcards"],
)  # fmt: skip
def test_a_wrong_stacked_intermediate_is_one_line(listed, returned, message):
    pytest.importorskip("equinox")
    import scanned

    def call(model, inputs):
        out, found = scanned._batched(model, inputs)
        return out, {listed[0]: returned(found["layers.*.linear"])}

    port = scanned.port("equinox", jax_call=call, jax_intermediates=listed)
    with pytest.raises(ValueError, match=message) as raised:
        print(port.mapping)
    assert "\n" not in str(raised.value)


def test_a_module_called_under_nnx_vmap_is_left_out_as_before():
    """``jax.debug.callback`` under ``vmap`` runs once per batch element: such calls are not shipped out
    per step (they would be misread as several calls), and the port passes on its output as before."""
    pytest.importorskip("flax")
    import torch
    from flax import nnx

    import crosscheck

    class Original(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(4, 3)

        def forward(self, x):
            return self.fc(x)

    class Mapped(nnx.Module):
        def __init__(self, rngs):
            self.fc = nnx.Linear(4, 3, rngs=rngs)

        def __call__(self, x):
            return nnx.vmap(lambda m, v: m(v), in_axes=(None, 0))(self.fc, x)

    torch.manual_seed(0)
    x = {"x": np.random.default_rng(0).standard_normal((5, 4))}
    port = crosscheck.Port(name="vmapped", torch=Original().eval(), jax=Mapped(nnx.Rngs(0)), inputs=x)
    report = crosscheck.run(workload=port, reference="torch", backends=["jax"])
    assert report.passed, report.problems
    assert [c.parameter for c in report.comparisons if "(output)" in (c.parameter or "")] == [
        "(model) (output)"
    ]


# ---- The example: examples/port/scanned_linen.py ------------------------------------------------------


@pytest.fixture(scope="module")
def scanned_linen():
    pytest.importorskip("torch")
    pytest.importorskip("flax")
    from examples.port import scanned_linen

    return scanned_linen


def test_the_scanned_linen_example_maps_every_layer_without_an_override(scanned_linen):
    rows = scanned_linen.port.mapping.rows()
    layers = [r for r in rows if r["torch"].startswith("layers.")]
    assert len(layers) == 6 * scanned_linen.L and all(
        r["box"] and "stacked: layer" in r["how"] for r in layers
    )
    assert all(r["status"] == "mapped" for r in rows)


@pytest.mark.parametrize("bug", ["layer_order", "epsilon"])
def test_each_planted_scanned_linen_bug_names_its_layer_and_module(scanned_linen, bug):
    import scanned

    report, verdict = scanned.verdict(getattr(scanned_linen, bug))
    assert not report.passed
    assert (verdict["starts_in"], verdict["module"]) == ("forward", scanned_linen.BUGS[bug][1])


def test_a_leaf_left_over_with_a_lists_length_says_the_stacked_override_to_write():
    torch = [T(f"layers.{i}.linear.bias", (6,)) for i in range(4)]
    table = mapping.build(torch, [J("params/layers/b", (4, 6))])  # no `linear` on the JAX side
    assert table.entries[-1].how == (
        "no PyTorch module of that name; its leading axis 4 is the length of PyTorch's `layers`: map its "
        "layers with overrides={'layers.*.NAME': ('params/layers/b', 'stacked')}"
    )
    chosen = mapping.build(
        torch, [J("params/layers/b", (4, 6))], {"layers.*.linear.bias": ("params/layers/b", "stacked")}
    )
    assert chosen.problems() == []


def test_a_jitted_call_traced_in_an_earlier_capture_is_recorded_in_this_one():
    """A jitted forward pass (``nnx.jit``, cached across captures) calls back into the capture running
    now, not into the one it was traced in: a second run compares every layer again."""
    pytest.importorskip("flax")
    import scanned
    from flax import nnx

    jitted = nnx.jit(lambda model, x: model(x))
    port = scanned.port("nnx", jax_call=lambda model, inputs: jitted(model, inputs["x"]))
    for _ in range(2):
        report, verdict = scanned.verdict(port)
        assert report.passed and verdict["starts_in"] == "nowhere", verdict["text"]
        outputs = {c.parameter for c in report.comparisons if "(output)" in (c.parameter or "")}
        assert {f"layers.{i}.linear (output)" for i in range(scanned.L)} <= outputs
