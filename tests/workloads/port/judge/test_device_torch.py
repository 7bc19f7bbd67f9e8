"""The PyTorch side of a port on a GPU, simulated on the CPU (CI has none): its cuDNN convolutions in TF32
(``torch.backends.cudnn.allow_tf32``, PyTorch's default) round their inputs to 10 bits of mantissa, and
its float64 re-run does not. The localisation allows each module's output the PyTorch side's device
arithmetic as its placement ran it (a named rounding term, as the JAX side's), so that a healthy conv
port passes with no module blamed; a planted bug is still named at its module. Without that allowance
the TF32 rounding of the original's own convolution was called the first difference."""

from __future__ import annotations

import pytest

import crosscheck

torch = pytest.importorskip("torch")
pytest.importorskip("jax")
pytest.importorskip("flax")

import simulated_gpu  # noqa: E402

from examples.port import convnet  # noqa: E402

#: The JAX side on the host CPU: only the PyTorch side's arithmetic is the card's.
ON_HOST = crosscheck.Execution(isolate=False, jax_platform="cpu")


@pytest.fixture
def tf32_convolutions(monkeypatch):
    """PyTorch's side says it runs on the simulated card, its convolutions in TF32 (cuDNN's flag on)."""
    simulated_gpu.torch_on_cuda(monkeypatch)
    simulated_gpu.torch_tf32_conv(monkeypatch)


def _check(port: crosscheck.Port, execution: crosscheck.Execution = ON_HOST) -> crosscheck.Report:
    return crosscheck.check(port, reference="torch", backends=["jax"], execution=execution)


def test_a_healthy_conv_port_passes_within_pytorchs_tf32_convolutions(tf32_convolutions):
    report = _check(convnet.port)
    assert report.passed, report.problems
    verdict = report.backends["jax"].notes["port"]
    assert verdict["starts_in"] == "nowhere"
    assert not [c.module for c in report.comparisons if c.module and not c.passed]
    assert "the PyTorch side ran on a CUDA (Simulated H200)" in verdict["text"]
    assert "convolutions in TF32 (cuDNN's flag on)" in verdict["text"]


def test_without_the_allowance_its_own_convolution_was_blamed(tf32_convolutions, monkeypatch):
    """The control: the localisation not told where the PyTorch side ran names `conv1` falsely (its own
    TF32 convolution, against its float64 re-run, judged as float32's rounding)."""
    from crosscheck._workloads.port.judge.workload import PortWorkload

    monkeypatch.setattr(PortWorkload, "torch_backend", lambda self: None)  # says nothing
    report = _check(convnet.port)
    assert not report.passed
    verdict = report.backends["jax"].notes["port"]["text"]
    assert verdict.startswith("the forward pass differs first at `conv1`")


def test_a_planted_bug_is_still_named_at_its_module(tf32_convolutions):
    _, module, bug = convnet.BUGS["kernel_dot_t"]
    report = _check(convnet.make_port("convnet-kernel-dot-t", **bug))
    assert not report.passed
    verdict = report.backends["jax"].notes["port"]
    assert verdict["text"].startswith(f"the forward pass differs first at `{module}`")
    failed = next(c for c in report.comparisons if c.module == module and not c.passed)
    assert "not the same computation" not in failed.message  # a difference, not a re-run called redrawn


def test_with_cudnns_tf32_off_the_side_is_judged_as_float32(tf32_convolutions):
    execution = crosscheck.Execution(isolate=False, jax_platform="cpu", torch_cudnn_tf32="off")
    report = _check(convnet.port, execution)
    assert report.passed, report.problems
    assert "convolutions in TF32" not in report.backends["jax"].notes["port"]["text"]
