"""The PyTorch side's proof on a GPU, simulated on the CPU (CI has none): a sum whose order changes from
call to call (a scatter-add's atomics) gives two losses that differ within the side's own rounding:
nondeterminism, counted and said, not a refusal. A difference beyond that rounding is still refused, and
the refusal offers the deterministic modes; on the CPU two calls must still agree bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("jax")

import simulated_gpu  # noqa: E402

import crosscheck  # noqa: E402
from crosscheck._backends.devices import placing  # noqa: E402
from crosscheck._workloads.port.sides import torch_device, torch_side  # noqa: E402


class Centred(torch.nn.Module):
    """``fc(x)`` shifted by its sum, made in another order each call (``Shuffled``);
    ``drift`` adds that much more on each call (a state it keeps: beyond any rounding)."""

    def __init__(self, drift: float = 0.0) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(8, 16)
        self.sum = simulated_gpu.Shuffled()
        self.drift, self.calls = drift, 0

    def forward(self, x):
        y = self.fc(x)
        self.calls += 1
        return y + self.sum(y.reshape(-1)) + self.drift * self.calls


def inputs() -> dict[str, np.ndarray]:
    return {"x": (np.random.default_rng(1).standard_normal((6, 8)) * 10).astype(np.float32)}


def prove(module: torch.nn.Module) -> torch_side.Wrapped:
    wrapped = torch_side.Wrapped(module, lambda m, given: m(given["x"]))
    params = {k: v.detach().numpy().copy() for k, v in module.state_dict().items()}
    torch_side.proof(lambda p, i: torch_side.call(wrapped, p, i).sum(), params, inputs(), wrapped)
    return wrapped


@pytest.fixture
def on_a_gpu(monkeypatch):
    """The side's sums reorder (a GPU without deterministic algorithms); its tensors stay on the host."""
    monkeypatch.setattr(torch_device, "reorders", lambda module: True)


def test_the_simulated_sum_differs_in_its_last_bits_from_call_to_call():
    torch.manual_seed(0)
    shuffled, v = simulated_gpu.Shuffled(), torch.randn(96) * 1e3
    assert shuffled(v).item() != shuffled(v).item()


def test_on_the_cpu_two_calls_must_agree_bit_for_bit():
    torch.manual_seed(0)
    with pytest.raises(torch_side.Misbehaved, match="another result on its second call") as refused:
        prove(Centred())
    assert "use_deterministic_algorithms" not in str(refused.value)


def test_on_a_gpu_a_difference_within_rounding_is_nondeterminism_counted(on_a_gpu):
    torch.manual_seed(0)
    assert prove(Centred()).reordered == 1


def test_on_a_gpu_a_difference_beyond_rounding_is_refused_with_the_deterministic_modes(on_a_gpu):
    torch.manual_seed(0)
    with pytest.raises(torch_side.Misbehaved, match="keeps state between calls") as refused:
        prove(Centred(drift=1.0))
    assert "torch.use_deterministic_algorithms" in str(refused.value)
    assert "xla_gpu_deterministic_ops" in str(refused.value)


def test_a_cuda_side_reorders_unless_pytorchs_deterministic_algorithms_are_on():
    module = torch.nn.Linear(2, 2)
    assert not torch_device.reorders(module)  # the host CPU
    with placing("torch", "cuda"):
        assert torch_device.reorders(module)
        before = torch.are_deterministic_algorithms_enabled()
        torch.use_deterministic_algorithms(True)
        try:
            assert not torch_device.reorders(module)
        finally:
            torch.use_deterministic_algorithms(before)


def test_a_port_whose_original_reorders_its_sums_passes_and_says_so(on_a_gpu):
    torch.manual_seed(0)
    module = Centred().eval()
    tree = {"w": np.zeros((8, 16), np.float32), "b": np.zeros(16, np.float32)}

    def jax_side(p, x):
        y = x @ p["w"] + p["b"]
        return y + y.sum()

    port = crosscheck.Port(
        name="centred",
        torch=module,
        jax=jax_side,
        jax_params=tree,
        overrides={"fc.weight": ("w", "transpose"), "fc.bias": "b"},
        inputs=inputs(),
    )
    report = crosscheck.check(port, reference="torch", execution=crosscheck.Execution(isolate=False))
    assert report.passed, report.problems
    text = report.backends["jax"].notes["port"]["text"]
    assert "the PyTorch side's two calls at the point differed within its own rounding" in text
