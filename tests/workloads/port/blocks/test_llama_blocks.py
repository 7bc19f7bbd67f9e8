"""Hugging Face Llama checked block by block (``examples/port/llama_blocks.py``), on its tiny config: each
``LlamaDecoderLayer`` against ``FlaxLlamaDecoderLayer``, the layer's rotary table ``position_embeddings``
(a tuple of tensors) recorded as one input a member and given back to the PyTorch layer as a tuple."""

from __future__ import annotations

import numpy as np
import pytest

import crosscheck

pytest.importorskip("torch")
pytest.importorskip("flax")
pytest.importorskip("transformers")


def test_a_tuple_argument_is_recorded_a_member_an_input_and_read_back(tmp_path):
    import torch

    from crosscheck._workloads.port.blocks.record import load, record
    from examples.port import llama_blocks

    blocks = llama_blocks.make_blocks()
    model = blocks.model()
    entries = record(blocks, model, str(tmp_path), seed=0, weights=False)
    assert [e["block"] for e in entries] == [f"model.layers.{i}" for i in range(3)]
    assert all(e["problem"] is None for e in entries), entries
    got = load(entries[1]["path"])
    assert got.tuples == {"position_embeddings": 2}
    wanted = {"hidden_states", "position_ids", "position_embeddings[0]", "position_embeddings[1]"}
    assert wanted <= set(got.inputs)
    # the members are the model's own rotary table, cos then sin, at the recorded positions
    ids = torch.as_tensor(got.inputs["position_ids"])
    cos, sin = model.model.rotary_emb(torch.as_tensor(got.inputs["hidden_states"]), ids)
    np.testing.assert_array_equal(got.inputs["position_embeddings[0]"], cos.numpy())
    np.testing.assert_array_equal(got.inputs["position_embeddings[1]"], sin.numpy())


def test_healthy_llama_blocks_pass():
    result = crosscheck.check_blocks("examples.port.llama_blocks:blocks", reference="torch")
    assert result.passed, result.lines()
    assert [(r["block"], r["status"]) for r in result.records] == [
        (f"model.layers.{i}", "passed") for i in range(3)
    ]


def test_a_planted_bug_in_one_layer_is_named_by_block_and_module():
    from examples.port import llama_blocks

    what, module, _ = llama_blocks.BUGS["rms_norm_eps"]
    result = crosscheck.check_blocks("examples.port.llama_blocks:rms_norm_eps", reference="torch")
    assert [r["status"] for r in result.records] == ["passed", "failed", "passed"], what
    assert result.first["block"] == "model.layers.1"
    assert result.first["module"] == module


def test_each_layer_rebuilt_alone_is_proven_the_models_forward_and_backward(tmp_path):
    # a worker's `torch_block` layer against the model's, its rotary table's members inputs too
    from crosscheck._workloads.port.blocks.record import block_module, load, record
    from examples.port import llama_blocks

    blocks = llama_blocks.make_blocks()
    entries = record(blocks, blocks.model(), str(tmp_path), seed=0, weights=True)
    for entry in entries:
        recorded = load(entry["path"])
        assert recorded.backward_problem is None
        assert {"input/hidden_states", "input/position_embeddings[0]"} <= set(recorded.backward)
        block_module(blocks, recorded)  # rebuilt by `torch_block`, proven: no error
