"""The PyTorch side of a port where the run places it (``--torch-device``) or where its module lives:
its tensors, its inputs and the module's own buffers (a non-persistent mask) put there for each call,
results on the host to be compared. CI has no CUDA: the same path runs with the device given explicitly
(``cpu``), and the report records it."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("jax")

import crosscheck  # noqa: E402
from crosscheck._backends.devices import placing  # noqa: E402
from crosscheck._workloads.port.sides import torch_device  # noqa: E402


class Masked(torch.nn.Module):
    """A Linear and a non-persistent buffer (no state_dict entry: ``tensors`` does not hand it); each
    forward notes the devices of what it computed with."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(3, 2)
        self.register_buffer("mask", torch.ones(2), persistent=False)
        self.devices: set[str] = set()

    def forward(self, x):
        self.devices |= {str(t.device) for t in (x, self.fc.weight, self.mask)}
        return self.fc(x) * self.mask


def test_the_device_is_the_runs_choice_else_where_the_module_lives():
    module = Masked()
    assert torch_device.device_of(module) == torch.device("cpu")  # where it lives
    with placing("torch", "cpu"):
        assert torch_device.device_of(module) == torch.device("cpu")
    with placing("torch", "cuda"):
        assert torch_device.device_of(module) == torch.device("cuda")  # asked for: not where it lives


def test_tensors_already_on_the_device_are_handed_as_they_are():
    module = Masked()
    state, inputs = {"fc.weight": torch.zeros(2, 3)}, {"x": torch.ones(4, 3)}
    with placing("torch", "cpu"):
        placed_state, placed_inputs = torch_device.on_device(module, state, inputs)
    assert placed_state is state and placed_inputs is inputs


def port() -> crosscheck.Port:
    torch.manual_seed(0)
    module = Masked().eval()
    tree = {"w": np.zeros((3, 2), np.float32), "b": np.zeros(2, np.float32)}
    x = {"x": np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)}
    return crosscheck.Port(
        name="masked",
        torch=module,
        jax=lambda p, x: x @ p["w"] + p["b"],
        jax_params=tree,
        overrides={"fc.weight": ("w", "transpose"), "fc.bias": "b"},
        inputs=x,
    )


def test_a_port_checked_with_its_pytorch_side_on_a_device_given_explicitly():
    checked = port()
    execution = crosscheck.Execution(isolate=False, torch_device="cpu")
    report = crosscheck.check(checked, reference="torch", execution=execution)
    assert report.passed, report.message
    assert checked.torch.devices == {"cpu"}
    recorded = report.to_dict()["torch_settings"]
    assert recorded["torch_device"] == "cpu" and recorded["torch_matmul_tf32"] == "default"
    assert report.backends["torch"].info["device"] == "cpu"


def test_a_ports_adapter_names_where_its_module_computes(monkeypatch):
    """A module living on a card is checked there, and its ``where`` says so (simulated: the module's
    device read as ``cuda``, the card named; CI has none)."""
    adapters = pytest.importorskip("crosscheck.backends.torch.workload")
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Simulated H200")
    adapter = adapters.TorchWorkloadBackend("torch", torch_device.Homed(lambda p, i: 0.0, Masked()))
    assert adapter.info()["platform"] == "cpu"  # where the module lives
    monkeypatch.setattr(torch_device, "device_of", lambda module: torch.device("cuda"))
    found = adapter.info()
    assert (found["platform"], found["device_kind"]) == ("cuda", "Simulated H200")
    assert adapter.arithmetic().platform == "cuda"
