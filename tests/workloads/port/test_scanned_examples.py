"""The scanned ports of ``examples/port`` as real projects write them (issue 36): Hugging Face's Llama
against an nnx port with ``nnx.scan`` over stacked layers and a fused, grouped-query ``qkv_proj``;
GPT-2's language model against an Equinox port with ``lax.scan`` over stacked blocks and a tied head.
Each healthy port maps with no override and passes; each planted bug fails and names its module."""

from __future__ import annotations

import pytest

import crosscheck

pytest.importorskip("torch")
pytest.importorskip("flax")
pytest.importorskip("equinox")
pytest.importorskip("transformers")


def _run(port, **options):
    return crosscheck.run(workload=port, backends=["jax"], **{"reference": "torch", **options})


@pytest.fixture(scope="module")
def llama():
    from examples.port import llama_nnx

    return llama_nnx


@pytest.fixture(scope="module")
def gpt2():
    from examples.port import gpt2_equinox

    return gpt2_equinox


def test_llama_nnx_maps_stacked_fused_grouped_query_layers_with_no_override_and_passes(llama):
    port = llama.port
    rows = {r["torch"]: r for r in port.mapping.rows()}
    assert not port.prepared.table.problems()
    k = rows["layers.2.self_attn.k_proj.weight"]  # one key/value head of 8 for two query heads of 8
    assert (k["jax"], k["box"], k["transform"]) == (
        "layers/self_attn/qkv_proj/kernel",
        [[0, 2, 3], [2, 16, 24]],
        "transpose",
    )
    report = _run(port)
    assert report.passed, report.problems


@pytest.mark.parametrize("name", ["rope_interleaved", "qkv_order", "no_causal_mask"])
def test_a_planted_llama_bug_fails_in_its_layers_attention(llama, name):
    report = _run(getattr(llama, name))
    verdict = report.backends["jax"].notes["port"]
    assert not report.passed
    assert verdict["module"] == llama.BUGS[name][1], verdict["text"]


def test_gpt2_equinox_maps_stacked_blocks_and_a_tied_head_with_no_override_and_passes(gpt2):
    port = gpt2.port
    rows = port.mapping.rows()
    assert not port.prepared.table.problems()
    head = [r for r in rows if r["jax"] == "transformer/wte/weight"]
    assert [r["torch"] for r in head] == ["transformer.wte.weight"]  # one leaf: the head is the table
    proj = next(r for r in rows if r["torch"] == "transformer.h.1.attn.c_proj.weight")
    assert (proj["transform"], proj["box"]) == ("transpose", [[0, 1, 2]])  # Conv1D (in, out) by layout
    report = _run(port)
    assert report.passed, report.problems


def test_a_planted_gpt2_bug_fails_at_its_block(gpt2):
    report = _run(gpt2.layer_norm_epsilon)
    verdict = report.backends["jax"].notes["port"]
    assert not report.passed
    assert verdict["module"] == gpt2.BUGS["layer_norm_epsilon"][1], verdict["text"]


def test_an_untied_head_is_refused_naming_it_and_the_override_that_accepts_it(gpt2):
    with pytest.raises(ValueError, match=r"the port unties them") as refused:
        _run(gpt2.untied_head)
    assert "`lm_head.weight` to `transformer.wte.weight`" in str(refused.value)
    assert "overrides={'lm_head.weight': 'lm_head/weight'}" in str(refused.value)


@pytest.fixture(scope="module")
def encoder():
    from examples.port import transformer_linen

    return transformer_linen


def test_the_scanned_encoder_splits_in_proj_onto_stacked_query_key_value_and_passes(encoder):
    port = encoder.scanned
    assert not port.prepared.table.problems()
    rows = [r for r in port.mapping.rows() if r["torch"] == "layers.1.self_attn.in_proj_weight"]
    assert [(r["jax"], r["take"], r["box"]) for r in rows] == [
        (f"params/layers/self_attn/{n}/kernel", [0, 8 * k, 8 * k + 8], [[0, 1, 2]])
        for k, n in enumerate(("query", "key", "value"))
    ]
    report = _run(port)
    assert report.passed, report.problems
    # each layer's output is its own step's (a subclass's `super().__call__` is one call of the module,
    # not two, which would pair `layers.1` with step 0's second record): no module cut apart
    assert not [c for c in report.comparisons if c.status == "boundary"]
    assert report.verdicts()["jax"].startswith("every module's output and every gradient agree")


def test_queries_and_keys_swapped_in_the_scanned_encoder_fail_at_the_first_layers_attention(encoder):
    report = _run(encoder.scanned_swapped_qk)
    verdict = report.backends["jax"].notes["port"]
    assert not report.passed
    assert verdict["module"] == "layers.0.self_attn", verdict["text"]
