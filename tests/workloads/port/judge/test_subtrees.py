"""A conversion's leaves pair the modules of a port under its own names: each PyTorch layer with the scan's
step its weights feed, each module with the JAX module made of exactly its tensors."""

from __future__ import annotations

import pytest

from crosscheck._workloads.port.judge.subtrees import module_pairs
from crosscheck._workloads.port.mapping.matching import CONVERT, Entry, Tensor

L = 3


def _row(torch_name: str, leaf: str) -> Entry:
    t = Tensor(tuple(torch_name.split(".")), (4,))
    j = Tensor(tuple(leaf.split("/")), (L, 4), kind="")
    return Entry(t, j, CONVERT, "by convert=")


def _llama(layer_of=lambda i: i):
    """A scanned Llama's rows under the port's own names (q, k, v fused into ``wqkv``), each layer ``i``
    feeding the stacked leaves at index ``layer_of(i)``."""
    rows, steps = [], {}
    parts = {
        "self_attn.q_proj.weight": "blocks/attention/wqkv",
        "self_attn.k_proj.weight": "blocks/attention/wqkv",
        "self_attn.v_proj.weight": "blocks/attention/wqkv",
        "self_attn.o_proj.weight": "blocks/attention/wo",
        "input_layernorm.weight": "blocks/attention_norm/scale",
        "mlp.gate_proj.weight": "blocks/feed_forward/wi",
        "mlp.up_proj.weight": "blocks/feed_forward/wi",
        "mlp.down_proj.weight": "blocks/feed_forward/wo",
    }
    for i in range(L):
        for part, leaf in parts.items():
            row = _row(f"model.layers.{i}.{part}", leaf)
            rows.append(row)
            steps[(row.torch.name, row.jax.path)] = layer_of(i)
    rows += [_row("model.norm.weight", "final_norm/scale"), _row("lm_head.weight", "output/kernel")]
    return rows, steps


@pytest.mark.parametrize("order", ["as-listed", "reversed"])
def test_each_layer_pairs_with_the_step_its_weights_feed(order):
    flip = (lambda i: i) if order == "as-listed" else (lambda i: L - 1 - i)
    rows, steps = _llama(flip)
    pairs = module_pairs(rows, steps)
    for i in range(L):
        at = flip(i)
        assert pairs[f"model.layers.{i}"] == f"blocks@{at}"
        assert pairs[f"model.layers.{i}.self_attn"] == f"blocks.attention@{at}"
        assert pairs[f"model.layers.{i}.mlp"] == f"blocks.feed_forward@{at}"
        assert pairs[f"model.layers.{i}.input_layernorm"] == f"blocks.attention_norm@{at}"
        # a projection fused with others into one leaf is no module of the port
        assert f"model.layers.{i}.self_attn.q_proj" not in pairs
    assert pairs["model.norm"] == "final_norm" and pairs["lm_head"] == "output"
    assert "model" not in pairs and "" not in pairs


def test_a_fused_kernel_s_parts_of_one_layer_are_no_scan_steps():
    """Layer ``i``'s q, k and v at indices 0, 1, 2 of its own (unscanned) ``(3, ...)`` kernel: the index
    is the part, not a step; the attention pairs whole, no projection with a step."""
    rows, steps = [], {}
    for i in range(2):
        for k, part in enumerate("qkv"):
            row = _row(f"layers.{i}.attn.{part}_proj.weight", f"layer_{i}/attention/qkv")
            rows.append(row)
            steps[(row.torch.name, row.jax.path)] = k
    pairs = module_pairs(rows, steps)
    assert pairs == {"layers.0.attn": "layer_0.attention", "layers.1.attn": "layer_1.attention"}


def test_a_leaf_made_of_part_of_a_module_pairs_nothing():
    """``mlp.gate_proj`` with ``attn.o_proj`` in one leaf: no PyTorch module holds exactly those two."""
    rows = [
        _row("layer.mlp.gate_proj.weight", "block/mixed/w"),
        _row("layer.attn.o_proj.weight", "block/mixed/w"),
        _row("layer.attn.q_proj.weight", "block/attention/wq"),
        _row("layer.mlp.up_proj.weight", "block/up/w"),
    ]
    pairs = module_pairs(rows, {})
    assert "layer.mlp" not in pairs and "layer.attn" not in pairs
    assert pairs["layer"] == "block"
    assert pairs["layer.attn.q_proj"] == "block.attention" and pairs["layer.mlp.up_proj"] == "block.up"


# ---- The example: a Llama ported to nnx, vmap-built layers run by scan, under its own names -------------


@pytest.fixture(scope="module")
def example():
    pytest.importorskip("torch")
    pytest.importorskip("flax")
    pytest.importorskip("transformers")
    from examples.port import llama_nnx_scanned

    return llama_nnx_scanned


def _verdict(port):
    import crosscheck

    report = crosscheck.run(workload=port, reference="torch", backends=["jax"])
    return report, report.backends["jax"].notes["port"]


def test_the_healthy_scanned_port_compares_every_layer_and_passes(example):
    report, verdict = _verdict(example.port)
    assert report.passed and verdict["starts_in"] == "nowhere", report.problems
    outputs = {c.parameter for c in report.comparisons if "(output)" in (c.parameter or "")}
    assert {f"model.layers.{i}.self_attn (output)" for i in range(example.L)} <= outputs


@pytest.mark.parametrize("bug", ["qkv_order", "gate_up_swapped"])
def test_a_bug_in_every_layer_is_named_at_the_first_layer(example, bug):
    report, verdict = _verdict(getattr(example, bug))
    assert not report.passed
    assert (verdict["starts_in"], verdict["module"]) == ("forward", example.BUGS[bug][1]), verdict["text"]
