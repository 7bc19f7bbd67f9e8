"""A fast subset of the zoo (``examples/port/zoo``, the whole of it in ``benchmarks/zoo.py``): every
architecture's mapping is complete with its few overrides; three small healthy pairs pass in float32
against PyTorch; two planted bugs fail and name their module."""

from __future__ import annotations

import importlib.util

import pytest

import crosscheck

needs = pytest.mark.skipif(
    any(importlib.util.find_spec(name) is None for name in ("transformers", "flax", "torch")),
    reason="needs transformers, flax and torch (the port extra)",
)
pytestmark = needs

#: The fast subset: a rotary + RMSNorm decoder, a BatchNorm ResNet, a GPT-Neo (local attention).
HEALTHY = ["llama", "resnet", "gpt_neo"]
PLANTED = ["llama_rotary_base", "resnet_batch_norm_epsilon"]


@pytest.fixture(scope="module")
def zoo():
    from examples.port import zoo

    return zoo


def test_the_zoo_covers_every_family_and_its_bugs_at_least_four_kinds_in_six_architectures(zoo):
    families = {arch.family for arch in zoo.ARCHS.values()}
    assert len(zoo.ARCHS) >= 12
    for family in ("encoder-only", "rotary + RMSNorm", "encoder-decoder", "vision transformer", "BatchNorm"):
        assert any(family in f for f in families), family
    assert {"clip", "t5", "bart", "wav2vec2", "marian", "pegasus", "roformer", "xglm"} <= set(zoo.ARCHS)
    assert len({bug.kind for bug in zoo.BUGS.values()}) >= 4
    assert len({bug.arch for bug in zoo.BUGS.values()}) >= 6
    assert all(bug.arch in zoo.ARCHS and name == f"{bug.arch}_{bug.kind}" for name, bug in zoo.BUGS.items())


@pytest.mark.parametrize("name", ["bert", "t5", "resnet", "wav2vec2", "clip", "marian", "roformer"])
def test_the_mapping_of_an_architecture_is_complete_with_only_its_declared_overrides(zoo, name):
    port = zoo.port(name)
    assert port.mapping.problems() == []
    overridden = {r["torch"] for r in port.mapping.rows() if "override" in (r["how"] or "")}
    declared = zoo.ARCHS[name].overrides
    expected = declared(port.torch) if callable(declared) else declared
    assert len(overridden) == len(expected)  # none but GPT-2's square Conv1D kernels
    assert bool(overridden) == bool(zoo.ARCHS[name].overrides_note)
    if name == "wav2vec2":  # weight norm's `original0`/`original1` against Flax's `weight_g`/`weight_v`
        normed = [r for r in port.mapping.rows() if "parametrizations" in r["torch"]]
        assert len(normed) == 2 and all("weight norm" in r["how"] for r in normed)


@pytest.fixture(scope="module")
def healthy(zoo):
    return {name: zoo.port(name) for name in HEALTHY}


@pytest.mark.parametrize("name", HEALTHY)
def test_a_healthy_pair_passes_against_pytorch_module_by_module(healthy, name):
    report = crosscheck.run(workload=healthy[name], reference="torch", backends=["jax"], dtype="float32")
    assert report.passed, report.problems
    modules = [c for c in report.comparisons if "(output)" in (c.parameter or "")]
    assert len(modules) > 5 and all(c.passed for c in modules)
    checked = {c.parameter for c in report.comparisons} - {c.parameter for c in modules}
    assert checked == set(healthy[name].prepared.parameters)


@pytest.mark.parametrize("name", PLANTED)
def test_a_planted_bug_fails_and_names_its_module(zoo, name):
    report = crosscheck.run(workload=zoo.port(name), reference="torch", backends=["jax"], dtype="float32")
    verdict = report.backends["jax"].notes["port"]
    assert not report.passed
    assert verdict["starts_in"] == "forward"
    assert verdict["module"] == zoo.BUGS[name].module, verdict["text"]


def test_a_sub_module_pinned_to_float32_is_named_in_a_float64_check(zoo):
    name = "gpt2_float32_sub_module"
    assert zoo.BUGS[name].seen_in == ("float64",)
    report = crosscheck.run(workload=zoo.port(name), reference="torch", backends=["jax"], dtype="float64")
    verdict = report.backends["jax"].notes["port"]
    assert not report.passed and verdict["module"] == zoo.BUGS[name].module == "ln_f"
    assert "`ln_f` (LayerNorm) computes in float32 in a float64 check" in verdict["text"]


def test_the_benchmark_chooses_its_cases_by_name_kind_and_architecture():
    from benchmarks.zoo import cases

    assert cases(["llama", "bert"], "healthy") == [("llama", "llama"), ("bert", "bert")]
    assert cases(["llama"], "all") == [("llama", "llama"), ("llama", "llama_rotary_base")]
    chosen = cases(["llama", "resnet"], "resnet_batch_norm_epsilon")
    assert chosen == [("resnet", "resnet_batch_norm_epsilon")]


def test_the_benchmarks_write_each_output_asked_for_with_every_row(tmp_path):
    import argparse
    import json

    from benchmarks import zoo as bench

    rows = [bench.Row("unet", "attention_scale", "torch", "float32", 0, verdict="FAILED", module="attn")]
    paths = {name: tmp_path / f"{name}.out" for name in ("markdown", "json", "side_by_side")}
    bench.write_outputs(rows, "the title", argparse.Namespace(**paths))
    assert json.loads(paths["json"].read_text())[0]["module"] == "attn"
    for name in ("markdown", "side_by_side"):
        text = paths[name].read_text()
        assert text.startswith("the title\n\n") and "attention_scale" in text, name
    bench.write_outputs(rows, "again", argparse.Namespace(markdown=None, json=None, side_by_side=None))
    assert paths["markdown"].read_text().startswith("the title")  # none asked for: none written
