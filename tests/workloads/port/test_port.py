"""``crosscheck.Port``: the mapping (names, layouts, ambiguity, overrides, unmatched), the port's
verdict on the convolutional example and on Hugging Face's GPT-2, healthy and with planted bugs."""

from __future__ import annotations

import importlib.util
import json
import re

import numpy as np
import pytest
from paths import ROOT

import crosscheck
from crosscheck._workloads.port.mapping import matching
from crosscheck._workloads.port.mapping import table as mapping
from crosscheck._workloads.port.mapping.matching import Tensor

needs = {
    name: pytest.mark.skipif(importlib.util.find_spec(name) is None, reason=f"needs {name}")
    for name in ("flax", "torch", "transformers", "equinox")
}


def T(name, shape, kind="parameter", module_type="", layout=None):
    return Tensor(tuple(name.split(".")), shape, kind, module_type, layout)


def J(path, shape, module_type="", layout=None):
    tokens = tuple(path.split("/"))
    linen = tokens[0] in ("params", "batch_stats")
    return Tensor(tokens, shape, tokens[0] if linen else "", module_type, layout, skip=int(linen))


#: (id, PyTorch tensor, JAX leaf, expected transform or None for ambiguous, words in ``how``)
SINGLE = [
    (
        "layernorm-scale",
        T("h.0.ln_1.weight", (8,)),
        J("params/h/0/ln_1/scale", (8,)),
        "identity",
        "same shape",
    ),
    ("list-index", T("layers.0.bias", (4,)), J("params/layers_0/bias", (4,)), "identity", "by name"),
    ("embedding", T("wte.weight", (16, 8)), J("params/wte/embedding", (16, 8)), "identity", "shapes"),
    ("dense-by-shape", T("fc.weight", (3, 16)), J("params/fc/kernel", (16, 3)), "transpose", "only layout"),
    (
        "dense-square-by-layout",
        T("fc.weight", (4, 4), module_type="Linear", layout="out,in"),
        J("params/fc/kernel", (4, 4), "Dense", "in,out"),
        "transpose",
        "layout: Linear",
    ),
    ("dense-square-unknown", T("c_proj.weight", (8, 8)), J("params/c_proj/kernel", (8, 8)), None, "both fit"),
    (
        "conv-by-layout",
        T("conv.weight", (4, 4, 3, 3), module_type="Conv2d", layout="OI.."),
        J("params/conv/kernel", (3, 3, 4, 4), "Conv", "..IO"),
        "OIHW->HWIO",
        "layout: Conv2d",
    ),
    (
        "conv-by-shape",
        T("conv.weight", (8, 3, 3, 3)),
        J("params/conv/kernel", (3, 3, 3, 8)),
        "OIHW->HWIO",
        "only",
    ),
    (
        "conv-cubic-unknown",
        T("conv.weight", (3, 3, 3, 3)),
        J("params/conv/kernel", (3, 3, 3, 3)),
        None,
        "fit",
    ),
    (
        "equinox-linear",
        T("fc.weight", (4, 4), module_type="Linear", layout="out,in"),
        J("fc/weight", (4, 4), "Linear", "out,in"),
        "identity",
        "layout",
    ),
    (
        "batch-stats",
        T("bn.running_mean", (4,), kind="buffer"),
        J("batch_stats/bn/mean", (4,)),
        "identity",
        "name",
    ),
]


@pytest.mark.parametrize(
    ("torch", "jax", "transform", "how"), [c[1:] for c in SINGLE], ids=[c[0] for c in SINGLE]
)
def test_one_tensor_maps_by_name_and_layout(torch, jax, transform, how):
    (entry,) = mapping.build([torch], [jax]).entries
    assert entry.jax == jax
    assert entry.transform == transform
    assert entry.status == ("ambiguous" if transform is None else "mapped")
    assert how in entry.how


def test_an_ambiguous_entry_is_a_problem_that_says_how_to_decide():
    table = mapping.build([T("c_proj.weight", (8, 8))], [J("params/c_proj/kernel", (8, 8))])
    (problem,) = table.problems()
    assert "`c_proj.weight` (8, 8) -> `params/c_proj/kernel` (8, 8) is ambiguous" in problem
    assert "overrides={'c_proj.weight': TRANSFORM}" in problem and "'transpose'" in problem
    assert "AMBIGUOUS" in str(table)


def test_the_mapping_is_not_quadratic_in_the_number_of_tensors(monkeypatch):
    # 10 000 one-element tensors took minutes before any number: every PyTorch tensor scanned every
    # JAX leaf. Counted in module-path comparisons (not seconds): a few per tensor, whatever the count.
    n = 2000
    torch = [T(f"layers.{i}.weight", (1,)) for i in range(n)] + [T("extra.weight", (1,))]
    jax = [J(f"params/layers_{i}/kernel", (1,)) for i in range(n)] + [J("params/other/kernel", (1,))]
    calls = []
    original = matching.canonical

    def counted(tokens):
        calls.append(1)
        if len(calls) > 10 * (len(torch) + len(jax)):
            raise AssertionError("the mapping compares module paths quadratically")
        return original(tokens)

    monkeypatch.setattr(matching, "canonical", counted)  # the matching's calls, and the table's
    monkeypatch.setattr(mapping, "canonical", counted)
    table = mapping.build(torch, jax)
    assert len(table.mapped()) == n
    assert [e.status for e in table.entries[n:]] == ["unmatched", "unmatched"]


def test_a_parameter_never_maps_onto_batch_statistics():
    table = mapping.build([T("bn.weight", (4,))], [J("batch_stats/bn/mean", (4,))])
    assert [e.status for e in table.entries] == ["unmatched", "unmatched"]
    assert len(table.problems()) == 2


def test_unmatched_on_either_side():
    torch = [T("a.weight", (2,)), T("bn.num_batches_tracked", (), kind="buffer")]
    table = mapping.build(torch, [J("params/b/scale", (2,))])
    problems = table.problems()
    assert any("PyTorch parameter `a.weight` (2,) is unmatched" in p for p in problems)
    assert any("JAX leaf `params/b/scale` (2,) is unmatched" in p for p in problems)
    assert not any("num_batches_tracked" in p for p in problems)  # a buffer the port does not use
    rows = {r["torch"]: r for r in table.rows()}
    assert rows["bn.num_batches_tracked"]["how"] == "a buffer the JAX model does not use"


SQUARE = [T("h.0.c_proj.weight", (8, 8)), T("h.1.c_proj.weight", (8, 8))]
SQUARE_JAX = [J("params/h/0/c_proj/kernel", (8, 8)), J("params/h/1/c_proj/kernel", (8, 8))]
OVERRIDES = [
    ("glob-transform", {"h.*.c_proj.weight": "transpose"}, ["transpose", "transpose"]),
    ("one-of-two", {"h.0.c_proj.weight": "identity"}, ["identity", None]),
    ("permutation", {"h.*.c_proj.weight": (1, 0)}, ["transpose", "transpose"]),
    (
        "path-and-transform",
        {
            "h.0.c_proj.weight": ("params/h/1/c_proj/kernel", "identity"),
            "h.1.c_proj.weight": ("params/h/0/c_proj/kernel", "identity"),
        },
        ["identity", "identity"],
    ),
]


@pytest.mark.parametrize(
    ("overrides", "transforms"), [c[1:] for c in OVERRIDES], ids=[c[0] for c in OVERRIDES]
)
def test_overrides_decide(overrides, transforms):
    table = mapping.build(SQUARE, SQUARE_JAX, overrides)
    assert [e.transform for e in table.entries[:2]] == transforms
    decided = [e for e in table.entries if e.torch and e.torch.name in overrides]
    assert all(e.how == "by override" for e in decided)


def test_an_override_to_a_path_swaps_the_leaves():
    table = mapping.build(SQUARE, SQUARE_JAX, dict(OVERRIDES[3][1]))
    assert [e.jax.path[2] for e in table.entries] == ["1", "0"]


def test_an_override_of_none_leaves_a_tensor_unmapped():
    table = mapping.build(SQUARE, SQUARE_JAX, {"h.1.c_proj.weight": None, "h.0.c_proj.weight": "transpose"})
    assert [e.status for e in table.entries] == ["mapped", "unmapped", "unmatched"]
    assert table.problems() == [  # the JAX leaf still needs a value; the PyTorch tensor is no problem
        "JAX leaf `params/h/1/c_proj/kernel` (8, 8) is unmatched: PyTorch tensors of that module: "
        "h.1.c_proj.weight; map one with overrides={NAME: 'params/h/1/c_proj/kernel'}"
    ]


BAD_OVERRIDES = [
    ("matches-nothing", {"nope.*": "transpose"}, "override `nope.*` matches no PyTorch tensor"),
    ("unknown-transform", {"h.0.c_proj.weight": "flip"}, "unknown transform `flip`"),
    ("not-a-permutation", {"h.0.c_proj.weight": (0, 0)}, "a permutation of 2 axes"),
    ("no-such-leaf", {"h.0.c_proj.weight": ("params/x/kernel", "identity")}, "no JAX leaf `params/x/kernel`"),
    ("does-not-fit", {"h.0.c_proj.weight": ("params/h/0/c_proj/kernel", (1, 0, 2))}, "permutation of 2 axes"),
]


@pytest.mark.parametrize(
    ("overrides", "message"), [c[1:] for c in BAD_OVERRIDES], ids=[c[0] for c in BAD_OVERRIDES]
)
def test_a_bad_override_is_a_one_line_error(overrides, message):
    with pytest.raises(ValueError, match="override") as info:
        mapping.build(SQUARE, SQUARE_JAX, overrides)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_a_shape_that_no_transform_fits_is_refused():
    table = mapping.build([T("fc.weight", (3, 5))], [J("params/fc/kernel", (4, 3))])
    assert "no transform fits" in table.entries[0].how
    assert table.problems()


# ---- Declaring a port --------------------------------------------------------------------------------


@needs["torch"]
@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"torch": 3}, TypeError, "must be a torch.nn.Module"),
        ({"inputs": 3}, TypeError, "`inputs` must be a dict"),
        ({"loss": 3}, TypeError, "`loss` must be callable"),
    ],
    ids=["not-a-module", "inputs", "loss"],
)
def test_a_bad_port_is_refused_with_one_line(kwargs, error, message):
    import torch

    module = torch.nn.Linear(2, 2).eval()
    given = {"name": "p", "torch": module, "jax": lambda p, x: x, "inputs": {"x": np.zeros((1, 2))}, **kwargs}
    with pytest.raises(error, match=message):
        crosscheck.Port(**given)


PORTS_FILE = """
import jax.numpy as jnp
import numpy as np
import torch

import crosscheck


def _port(name, training):
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.Dropout(0.1)).train(training)
    tree = {"w": np.zeros((3, 2)), "b": np.zeros(2)}
    x = {"input": np.random.default_rng(0).standard_normal((4, 3))}  # torch.nn.Sequential.forward(input)
    mapping = {"0.weight": ("w", "transpose"), "0.bias": "b"}
    return crosscheck.Port(name=name, torch=module, jax=lambda p, input: input @ p["w"] + p["b"],
                           jax_params=tree, overrides=mapping, inputs=x)


good = _port("good", training=False)
bad = _port("bad", training=True)
"""

TRAINING = (
    r"^port `bad`: the PyTorch module is in training mode and `1` \(Dropout, p=0\.1\) drops at random, so no "
    r"two calls agree; make it deterministic: `model\.1\.eval\(\)` \(or p=0\), and on the JAX side "
    r"`deterministic=True` .*\.$"
)


@needs["torch"]
def test_a_port_in_training_mode_with_dropout_does_not_break_its_module(tmp_path, monkeypatch, capsys):
    (tmp_path / "two_ports.py").write_text(PORTS_FILE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    import two_ports  # the bad port is made: nothing is refused before it is used

    from crosscheck._cli.main import main

    report = crosscheck.run(workload=two_ports.good, reference="torch", backends=["jax"])
    assert report.passed, report.problems
    argv = ["run", "--workload", "two_ports:good", "--reference", "torch", "--no-isolate", "--quiet"]
    assert main(argv) == 0
    capsys.readouterr()
    with pytest.raises(ValueError, match=TRAINING):
        crosscheck.run(workload=two_ports.bad, reference="torch", backends=["jax"])
    with pytest.raises(ValueError, match=TRAINING):
        print(two_ports.bad.mapping)
    assert main(["run", "--workload", "two_ports:bad", "--no-isolate"]) == 2
    err = capsys.readouterr().err
    assert "port `bad`: the PyTorch module is in training mode and `1` (Dropout, p=0.1)" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


@needs["torch"]
def test_a_module_put_back_into_training_mode_with_dropout_is_refused_at_use():
    import torch

    module = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Dropout(0.5)).eval()
    port = crosscheck.Port(name="p", torch=module, jax=lambda p, x: x, inputs={"x": np.zeros((1, 2))})
    module.train()  # after the port was made
    with pytest.raises(ValueError, match=r"^port `p`: the PyTorch module is in training mode"):
        print(port.mapping)


@needs["torch"]
def test_a_prepared_port_whose_module_goes_back_into_training_mode_with_dropout_is_refused(
    tmp_path, monkeypatch
):
    (tmp_path / "two_ports_again.py").write_text(PORTS_FILE)
    monkeypatch.syspath_prepend(str(tmp_path))
    import two_ports_again

    good = two_ports_again.good
    print(good.mapping)  # prepared once, in eval mode
    good.torch.train()
    with pytest.raises(ValueError, match=r"^port `good`: the PyTorch module is in training mode"):
        crosscheck.run(workload=good, reference="torch", backends=["jax"])


# ---- The convolutional example -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def convnet():
    pytest.importorskip("flax")
    pytest.importorskip("torch")
    from examples.port import convnet

    return convnet


@needs["flax"]
def test_the_conv_mapping_shows_every_transform(convnet):
    rows = {r["torch"]: r for r in convnet.port.mapping.rows()}
    assert (
        rows["conv1.weight"]["transform"] == "OIHW->HWIO"
        and rows["conv1.weight"]["jax"] == "params/conv1/kernel"
    )
    assert rows["fc.weight"]["transform"] == "transpose"
    assert rows["bn1.running_var"]["jax"] == "batch_stats/bn1/var"
    assert rows["bn1.num_batches_tracked"]["status"] == "unmatched"
    line = r"conv1.weight \(4, 3, 3, 3\) +-> params/conv1/kernel \(3, 3, 3, 4\) +OIHW->HWIO +by name; layout"
    assert re.search(line, str(convnet.port.mapping))


@needs["flax"]
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_healthy_conv_port_passes(convnet, dtype):
    report = crosscheck.run(workload=convnet.port, dtype=dtype)
    assert report.passed, report.problems
    modules = [c.parameter for c in report.comparisons if c.backend == "jax" and "(output)" in c.parameter]
    assert modules == ["conv1 (output)", "bn1 (output)", "fc (output)", "(model) (output)"]
    assert report.backends["jax"].notes["port"]["starts_in"] == "nowhere"


@needs["flax"]
@pytest.mark.parametrize("bug", ["same_padding", "kernel_dot_t", "flatten_nhwc", "straight_through_relu"])
def test_each_planted_conv_bug_is_located(convnet, bug):
    # The verdict does not depend on the gradient's reference: PyTorch's keeps it quick.
    report = crosscheck.run(workload=getattr(convnet, bug), reference="torch", backends=["jax"])
    verdict = report.backends["jax"].notes["port"]
    assert not report.passed
    expected = {
        "same_padding": ("forward", "conv1", "conv1"),
        "kernel_dot_t": ("forward", "conv1", "conv1"),
        "flatten_nhwc": ("forward", "", "fc"),  # the top module's own code between bn1 and fc
        "straight_through_relu": ("gradient", "bn1", "bn1"),
    }[bug]
    assert (verdict["starts_in"], verdict["module"], verdict["first"]) == expected
    assert report.problems[0].startswith("`jax`: ") and verdict["text"] in report.problems[0]
    if bug in ("flatten_nhwc", "straight_through_relu"):
        assert verdict["suspects"] == ["relu", "pool"]


@needs["flax"]
def test_the_cli_shows_the_mapping_then_the_verdict(convnet, monkeypatch, capsys, tmp_path):
    from crosscheck._cli.main import main

    monkeypatch.chdir(ROOT)
    status = main(
        [
            "run",
            "--workload",
            "examples.port.convnet:kernel_dot_t",
            "--backend",
            "jax",
            "--reference",
            "torch",
            "--json",
            str(tmp_path / "r.json"),
        ]
    )
    out = capsys.readouterr().out
    assert status == 1
    assert re.search(r"params/conv1/kernel \(3, 3, 3, 4\) +\(3, 2, 1, 0\) +by override", out)
    assert out.index("by override") < out.index("max abs") < out.index("verdict of `jax`")
    assert "the forward pass differs first at `conv1` (Conv2d): its input agrees" in out
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["backends"]["jax"]["notes"]["port"]["module"] == "conv1"
    assert {"torch": "conv1.weight", "transform": "(3, 2, 1, 0)"}.items() <= data["case"]["mapping"][
        0
    ].items()


@needs["flax"]
def test_an_unresolved_mapping_stops_the_run_before_any_numerics(convnet, monkeypatch, capsys):
    from crosscheck._cli.main import main

    unmapped = convnet.make_port("unmapped", overrides={"fc.weight": None})
    with pytest.raises(ValueError, match=r"JAX leaf `params/fc/kernel` \(16, 3\) is unmatched"):
        crosscheck.run(workload=unmapped)
    monkeypatch.setattr(convnet, "unmapped", unmapped, raising=False)
    monkeypatch.chdir(ROOT)
    # --no-isolate: the port is patched into the module in this process only.
    assert main(["run", "--workload", "examples.port.convnet:unmapped", "--no-isolate"]) == 2
    err = capsys.readouterr().err
    assert "is unmatched" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def _float32_only(module, inputs):
    if inputs["x"].dtype == np.float64:
        raise RuntimeError("this port computes in float32 only")
    return module(**inputs)


@needs["flax"]
def test_a_port_that_cannot_run_in_float64_is_judged_with_pytorchs_rounding(convnet):
    port = crosscheck.Port(
        name="float32-only",
        torch=convnet.torch_model(),
        jax=convnet.flax_model(),
        inputs=convnet.images,
        jax_inputs=lambda i: {"x": i["x"].transpose(0, 2, 3, 1)},
        jax_call=_float32_only,
    )
    report = crosscheck.run(workload=port, reference="torch", backends=["jax"])
    assert report.passed and not [c for c in report.comparisons if c.parameter == "(modules)"]
    text = report.backends["jax"].notes["port"]["text"]
    assert "the JAX side could not be re-run in the other precision" in text
    assert "this port computes in float32 only" in text


@needs["flax"]
def test_the_pytest_helper_takes_a_port(convnet):
    from crosscheck.testing import assert_gradients_close

    assert assert_gradients_close(convnet.port, reference="torch").passed
    with pytest.raises(AssertionError, match=r"FAILED: `jax`: the forward pass differs first at `conv1`"):
        assert_gradients_close("examples.port.convnet:same_padding", reference="torch", backends=["jax"])


# ---- Hugging Face GPT-2: PyTorch against its own Flax port -------------------------------------------


@pytest.fixture(scope="module")
def gpt2():
    pytest.importorskip("transformers")
    pytest.importorskip("flax")
    from examples.port import gpt2

    return gpt2


@needs["transformers"]
def test_the_gpt2_mapping_agrees_with_hugging_faces_conversion(gpt2):
    import jax
    from transformers import FlaxGPT2Model, GPT2Config
    from transformers.modeling_flax_pytorch_utils import convert_pytorch_state_dict_to_flax

    from crosscheck._workloads.port.declare.build import jax_leaves

    port = gpt2.port
    prepared = port.prepared
    flax_model = FlaxGPT2Model(GPT2Config(**gpt2.CONFIG), seed=0)
    theirs = convert_pytorch_state_dict_to_flax(port.torch.state_dict(), flax_model)
    ours = jax_leaves(prepared, prepared.values, prepared.values)
    flat = {
        tuple(str(k.key) for k in path): leaf
        for path, leaf in jax.tree_util.tree_flatten_with_path(theirs)[0]
    }
    assert len(flat) == len(ours) == len(prepared.jax_side.leaves)
    for leaf, value in zip(prepared.jax_side.leaves, ours, strict=True):
        np.testing.assert_array_equal(np.asarray(value), np.asarray(flat[leaf.path[1:]]), err_msg=leaf.name)


@needs["transformers"]
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_healthy_gpt2_pair_passes(gpt2, dtype):
    report = crosscheck.run(workload=gpt2.port, reference="torch", backends=["jax"], dtype=dtype)
    assert report.passed, report.problems
    # Hugging Face's Flax module is built with dtype=float32: a float64 check clones it, and says so
    cloned = "float32, cloned to float64 for this check" if dtype == "float64" else None
    assert report.case.get("jax_dtype") == cloned
    modules = {c.parameter for c in report.comparisons if "(output)" in (c.parameter or "")}
    assert {"h.0.ln_1 (output)", "h.1.attn.c_proj (output)", "ln_f (output)"} <= modules
    assert len([c for c in report.comparisons if "(output)" not in c.parameter]) == len(port_parameters(gpt2))


def port_parameters(gpt2):
    return gpt2.port.prepared.parameters


@needs["transformers"]
@pytest.mark.parametrize(
    "bug", ["layer_norm_epsilon", "gelu_exact", "attention_scale", "kernel_not_transposed"]
)
def test_each_planted_gpt2_bug_is_located_to_its_module(gpt2, bug):
    report = crosscheck.run(workload=getattr(gpt2, bug), reference="torch", backends=["jax"])
    verdict = report.backends["jax"].notes["port"]
    assert not report.passed
    assert verdict["starts_in"] == "forward"
    assert verdict["module"] == gpt2.BUGS[bug][1], verdict["text"]
    assert report.problems[0] == f"`jax`: {verdict['text']}"
    assert " more" in report.problems[1]  # the modules and tensors that differ after it, counted


@needs["transformers"]
def test_the_square_gpt2_kernels_are_ambiguous_without_the_override(gpt2):
    from examples.port.gpt2 import make_port

    port = make_port(overrides={"h.*.attn.c_proj.weight": ("params/h/0/attn/c_proj/kernel", "transpose")})
    assert port.mapping.problems()  # both PyTorch kernels onto one leaf: the other leaf is unmatched
    plain = crosscheck.Port(**{**_fields(gpt2.port), "overrides": None})
    ambiguous = [r["torch"] for r in plain.mapping.rows() if r["status"] == "ambiguous"]
    assert ambiguous == ["h.0.attn.c_proj.weight", "h.1.attn.c_proj.weight"]
    with pytest.raises(ValueError, match=r"`h.0.attn.c_proj.weight` \(8, 8\) .* is ambiguous"):
        crosscheck.run(workload=plain, reference="torch")


def _fields(port):
    import dataclasses

    return {f.name: getattr(port, f.name) for f in dataclasses.fields(port)}


# ---- Equinox and a plain function of a pytree ---------------------------------------------------------


def _torch_mlp():
    import torch

    class TorchMLP(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.fc2 = torch.nn.Linear(3, 4), torch.nn.Linear(4, 2)

        def forward(self, x):
            return self.fc2(torch.tanh(self.fc1(x)))

    torch.manual_seed(0)
    return TorchMLP().eval()


X = {"x": np.random.default_rng(0).standard_normal((5, 3))}


@needs["equinox"]
@pytest.mark.parametrize("activation", ["tanh", "sigmoid"])
def test_an_equinox_port(activation):
    import equinox as eqx
    import jax
    import jax.numpy as jnp

    class EqxMLP(eqx.Module):
        fc1: eqx.nn.Linear
        fc2: eqx.nn.Linear

        def __init__(self, key):
            k1, k2 = jax.random.split(key)
            self.fc1, self.fc2 = eqx.nn.Linear(3, 4, key=k1), eqx.nn.Linear(4, 2, key=k2)

        def __call__(self, x):
            return self.fc2(
                getattr(jnp, activation)(self.fc1(x)) if activation == "tanh" else jax.nn.sigmoid(self.fc1(x))
            )

    port = crosscheck.Port(name="eqx", torch=_torch_mlp(), jax=EqxMLP(jax.random.key(0)), inputs=X,
                           jax_call=lambda m, i: jax.vmap(m)(i["x"]))  # fmt: skip
    assert [r["transform"] for r in port.mapping.rows()] == ["identity"] * 4  # Equinox stores (out, in)
    report = crosscheck.run(workload=port, reference="torch")
    verdict = report.backends["jax"].notes["port"]
    assert report.passed == (activation == "tanh"), report.problems
    assert verdict["starts_in"] == ("nowhere" if activation == "tanh" else "forward")
    if activation == "tanh":
        assert "only the output is compared" in verdict["text"]


@needs["equinox"]
@pytest.mark.parametrize("activation", ["tanh", "sigmoid"])
def test_an_equinox_convolution_port_maps_its_bias_by_unit_axes(activation):
    """Equinox's ``Conv2d`` keeps its bias as ``(C, 1, 1)``, PyTorch's ``(C,)``: mapped with no override,
    the gradient comes back in PyTorch's shape, and a wrong activation still fails."""
    import equinox as eqx
    import jax
    import torch
    from torch import nn

    class TorchConv(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv, self.fc = nn.Conv2d(2, 3, 3, padding=1), nn.Linear(3 * 4 * 4, 2)

        def forward(self, x):
            return self.fc(torch.tanh(self.conv(x)).flatten(1))

    class EqxConv(eqx.Module):
        conv: eqx.nn.Conv2d
        fc: eqx.nn.Linear

        def __init__(self, key):
            k1, k2 = jax.random.split(key)
            self.conv = eqx.nn.Conv2d(2, 3, 3, padding=1, key=k1)
            self.fc = eqx.nn.Linear(3 * 4 * 4, 2, key=k2)

        def __call__(self, x):
            return self.fc(getattr(jax.nn, activation)(self.conv(x)).reshape(-1))

    torch.manual_seed(0)
    port = crosscheck.Port(
        name="eqx-conv",
        torch=TorchConv().eval(),
        jax=EqxConv(jax.random.key(0)),
        inputs={"x": np.random.default_rng(0).standard_normal((2, 2, 4, 4))},
        jax_call=lambda m, i: jax.vmap(m)(i["x"]),
    )
    rows = {r["torch"]: r for r in port.mapping.rows()}
    assert rows["conv.bias"]["transform"] == "unit axes", rows["conv.bias"]
    report = crosscheck.run(workload=port, reference="torch")
    assert report.passed == (activation == "tanh"), report.problems
    bias = [c for c in report.comparisons if c.backend == "jax" and c.parameter == "conv.bias"]
    assert bias and all(c.status != "invalid" for c in bias)  # judged, in PyTorch's shape
    if activation == "tanh":  # the trained leaves come back in PyTorch's shape too
        import optax

        train = crosscheck.Train(
            port,
            torch_optimizer=lambda named, lr: torch.optim.Adam([p for _, p in named], lr=lr),
            optax=lambda lr: optax.adam(lr),
            hyper={"lr": 1e-2},
            steps=3,
        )
        trained = crosscheck.check(train, quantity="update")
        assert trained.passed, trained.problems


@needs["torch"]
def test_a_plain_function_of_a_pytree():
    import jax.numpy as jnp

    def fn(params, x):
        h = jnp.tanh(x @ params["fc1"]["w"] + params["fc1"]["b"])
        return h @ params["fc2"]["w"] + params["fc2"]["b"]

    tree = {
        "fc1": {"w": np.zeros((3, 4)), "b": np.zeros(4)},
        "fc2": {"w": np.zeros((4, 2)), "b": np.zeros(2)},
    }
    port = crosscheck.Port(name="fn", torch=_torch_mlp(), jax=fn, jax_params=tree, inputs=X)
    assert [r["transform"] for r in port.mapping.rows()] == ["transpose", "identity"] * 2
    report = crosscheck.run(workload=port)  # the finite-difference oracle of PyTorch's float64 loss
    assert report.passed, report.problems
    with pytest.raises(ValueError, match="needs `jax_params`"):
        print(crosscheck.Port(name="fn", torch=_torch_mlp(), jax=fn, inputs=X).mapping)


@needs["torch"]
@pytest.mark.parametrize("reference", ["torch", "numpy-fd"])
def test_a_float64_pass_makes_tensors_without_a_dtype_float64(reference):
    # Hugging Face CLIP builds its causal mask as torch.full(shape, torch.finfo(dtype).min) with no
    # dtype: in a float64 pass that is float64's minimum into a float32 tensor, which overflows.
    import jax.numpy as jnp
    import torch

    class Masked(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.fc2 = _torch_mlp().fc1, _torch_mlp().fc2

        def forward(self, x):
            h = self.fc1(x)
            floor = torch.full(h.shape, torch.finfo(h.dtype).min)
            return self.fc2(torch.tanh(torch.maximum(h, floor)))

    def fn(params, x):
        return jnp.tanh(x @ params["fc1"]["w"] + params["fc1"]["b"]) @ params["fc2"]["w"] + params["fc2"]["b"]

    zeros = {"w": np.zeros((3, 4)), "b": np.zeros(4)}, {"w": np.zeros((4, 2)), "b": np.zeros(2)}
    tree = dict(zip(("fc1", "fc2"), zeros, strict=True))
    port = crosscheck.Port(name="masked", torch=Masked().eval(), jax=fn, jax_params=tree, inputs=X)
    dtype = "float64" if reference == "torch" else "float32"  # the oracle differences float64 losses
    report = crosscheck.run(workload=port, reference=reference, dtype=dtype)
    assert report.passed, report.problems
    assert "default dtype" in report.case["torch_float64"]
    assert torch.get_default_dtype() == torch.float32  # restored after
