"""Both sides on a GPU, simulated on the CPU (CI has none): TF32 products (inputs rounded to 10 bits of
mantissa) on JAX's side at its default precision and on PyTorch's side while its matmul flag is on.

With the device model's GPU rows, a healthy model passes as asked: TF32 is a named rounding term, so no
second run is needed to explain it (the classification's re-run at ``highest`` then confirms, as on a
TPU); PyTorch's re-run at its ``highest`` is its TF32 off. Without the rows each would fail as "not the
same computation" and pass only at ``highest``.
"""

from __future__ import annotations

import numpy as np
import pytest

import crosscheck

torch = pytest.importorskip("torch")
jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
nn = pytest.importorskip("flax.linen")

import simulated_gpu  # noqa: E402
from simulated_device import TorchMLP  # noqa: E402

WIDTH, HIDDEN, OUT = 48, 96, 24


def jax_port(shift: float = 0.0) -> crosscheck.Port:
    class FlaxMLP(nn.Module):
        @nn.compact
        def __call__(self, x):
            h = jnp.tanh(nn.Dense(HIDDEN, name="fc1", dot_general=simulated_gpu.tf32_dot)(x))
            return nn.Dense(OUT, name="fc2", dot_general=simulated_gpu.tf32_dot)(h) + shift

    x = np.random.default_rng(3).standard_normal((16, WIDTH)).astype(np.float32)
    torch.manual_seed(0)
    module = TorchMLP(WIDTH, HIDDEN, OUT).eval()
    return crosscheck.Port(name="mlp", torch=module, jax=FlaxMLP(), inputs={"x": x})


def test_a_healthy_port_with_jax_on_a_gpu_passes_as_asked_within_tf32(monkeypatch):
    simulated_gpu.jax_on_a_gpu(monkeypatch)
    report = crosscheck.run(workload=jax_port(), reference="torch", backends=["jax"])
    assert report.passed, report.problems
    found = report.classification
    assert found["kind"] == "confirmed" and found["runs"][0]["passed"]  # no second run to explain TF32
    assert found["runs"][0]["platform"] == "gpu"


def test_without_the_gpu_rows_the_same_port_fails_as_asked_and_nothing_explains_it(monkeypatch):
    """The control: TF32 judged as float32 fails as asked; it passes at ``highest`` (a second whole run),
    but with no model of the card's products nothing may explain the difference, and the check fails."""
    from crosscheck._compare import device

    simulated_gpu.jax_on_a_gpu(monkeypatch)
    monkeypatch.delitem(device.PRODUCT_UNITS, ("jax", "gpu"))
    report = crosscheck.run(workload=jax_port(), reference="torch", backends=["jax"])
    assert not report.passed and report.classification["kind"] == "unmodelled"
    runs = report.classification["runs"]
    assert not runs[0]["passed"] and runs[1]["run"] == "highest" and runs[1]["passed"]


def test_a_port_bug_on_a_gpu_still_fails_and_is_located_on_the_host(monkeypatch):
    simulated_gpu.jax_on_a_gpu(monkeypatch)
    report = crosscheck.run(workload=jax_port(shift=0.5), reference="torch", backends=["jax"])
    assert not report.passed and report.classification["kind"] == "port"


SHAPES = {"w1": (8, 32), "w2": (32, 4)}


def numpy_loss(p, i):
    return float(np.sum((np.tanh(i["x"] @ p["w1"]) @ p["w2"]) ** 2))


def torch_loss(p, i):
    h = torch.tanh(simulated_gpu.torch_tf32_matmul(i["x"], p["w1"]))
    return torch.sum(simulated_gpu.torch_tf32_matmul(h, p["w2"]) ** 2)


WORKLOAD = crosscheck.Workload(
    name="tf32",
    parameters=SHAPES,
    inputs={"x": (16, 8)},
    reference=numpy_loss,
    implementations={"torch": torch_loss},
)


def test_pytorch_on_cuda_with_tf32_products_passes_within_them_and_its_highest_is_tf32_off(monkeypatch):
    simulated_gpu.torch_on_cuda(monkeypatch)
    # its products alone in TF32 (cuDNN's flag, on by default, is a term of its own: CONV_UNITS)
    execution = crosscheck.Execution(isolate=False, torch_matmul_tf32="on", torch_cudnn_tf32="off")
    report = crosscheck.check(WORKLOAD, backends=["torch"], execution=execution)
    assert report.passed, report.problems
    assert report.backends["torch"].info["platform"] == "cuda"
    found = report.classification
    assert found["kind"] == "confirmed" and found["runs"][0]["passed"]  # TF32 on, within its rounding
    assert found["runs"][1]["run"] == "highest" and found["runs"][1]["passed"]
    # the report is the re-run's at PyTorch's highest: its TF32 off, for products and convolutions
    settings = report.to_dict()["torch_settings"]
    assert (settings["torch_matmul_tf32"], settings["torch_cudnn_tf32"]) == ("off", "off")


def test_pytorch_on_cuda_at_its_defaults_computes_float32_products_and_is_judged_as_float32(monkeypatch):
    simulated_gpu.torch_on_cuda(monkeypatch)
    report = crosscheck.check(WORKLOAD, backends=["torch"], execution=crosscheck.Execution(isolate=False))
    assert report.passed, report.problems
    assert report.backends["torch"].info["matmul_tf32"] == "off"
