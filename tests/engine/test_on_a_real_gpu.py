"""Both sides on a real CUDA card (``-m gpu``; skipped where there is none, as on CI): a port whose
PyTorch module lives on ``cuda`` is checked there, and so is one placed there by ``torch_device``; the
``where`` line names both sides' devices. What the simulation cannot show: the tensors really moved."""

from __future__ import annotations

import numpy as np
import pytest

import crosscheck

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")
pytest.importorskip("jax")


def port(module: torch.nn.Module) -> crosscheck.Port:
    tree = {"w": np.zeros((3, 2), np.float32), "b": np.zeros(2, np.float32)}
    x = {"x": np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)}
    return crosscheck.Port(
        name="linear",
        torch=module,
        jax=lambda p, x: x @ p["w"] + p["b"],
        jax_params=tree,
        overrides={"weight": ("w", "transpose"), "bias": "b"},
        inputs=x,
    )


@pytest.mark.parametrize("how", ["module on cuda", "torch_device cuda"])
def test_a_port_checked_on_the_card(how):
    torch.manual_seed(0)
    module = torch.nn.Linear(3, 2).eval()
    if how == "module on cuda":
        module = module.to("cuda")
    execution = crosscheck.Execution(
        isolate=False, torch_device="cuda" if how != "module on cuda" else "default"
    )
    report = crosscheck.check(port(module), reference="torch", execution=execution)
    assert report.passed, report.problems
    if how == "torch_device cuda":
        assert report.backends["torch"].info["platform"] == "cuda"
