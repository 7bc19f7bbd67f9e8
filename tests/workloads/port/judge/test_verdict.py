"""Where the forward pass differs first (``verdict.forward_origin``), from records alone."""

from __future__ import annotations

import numpy as np

from crosscheck._workloads.port.judge.verdict import forward_origin
from crosscheck._workloads.port.sides.torch_side import ModuleCall

A, B = (np.ones(3),), (np.zeros(3),)


def R(name: str, inputs=A, outputs=A) -> ModuleCall:
    return ModuleCall(name, "Linear", inputs, outputs)


# Llama's attention against a port with a fused qkv: q_proj, k_proj and v_proj have no counterpart
ORDER = [
    R("layers.0.input_layernorm"),
    R("layers.0.self_attn.q_proj"),
    R("layers.0.self_attn.k_proj"),
    R("layers.0.self_attn.v_proj"),
    R("layers.0.self_attn.o_proj", inputs=B, outputs=B),
    R("layers.0.self_attn", outputs=B),
]
PAIRED = {r: r for r in ("layers.0.input_layernorm", "layers.0.self_attn.o_proj", "layers.0.self_attn")}


def test_a_difference_made_among_modules_of_one_running_module_names_it():
    outputs = {
        "layers.0.input_layernorm": True,
        "layers.0.self_attn.o_proj": False,
        "layers.0.self_attn": False,
    }
    inputs = {"layers.0.self_attn.o_proj": False}
    verdict = forward_origin(ORDER, PAIRED, outputs, inputs, "Model")
    assert verdict.module == "layers.0.self_attn"
    said = "the forward pass differs first in the code of `layers.0.self_attn` (or just before it, in"
    assert verdict.text.startswith(said + " `layers.0`)")
    assert verdict.suspects == (
        "layers.0.self_attn.q_proj",
        "layers.0.self_attn.k_proj",
        "layers.0.self_attn.v_proj",
    )


def test_with_no_module_run_in_between_the_common_parent_is_named():
    order = [ORDER[0], ORDER[4], ORDER[5]]
    outputs = {
        "layers.0.input_layernorm": True,
        "layers.0.self_attn.o_proj": False,
        "layers.0.self_attn": False,
    }
    verdict = forward_origin(order, PAIRED, outputs, {"layers.0.self_attn.o_proj": False}, "Model")
    assert verdict.module == "layers.0"
    assert "in the code of `layers.0` between" in verdict.text
