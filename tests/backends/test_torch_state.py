"""The PyTorch side's placement (``backends/torch/state.placed``): its device, its TF32 switches for
products and for cuDNN convolutions and its deterministic mode, in effect for one call and restored
after; a CUDA device this process lacks refused in one line (exit 2); where the side ran, said on the
report's ``where`` line (a CUDA card simulated by its name: CI has none)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import types

import pytest

import crosscheck
from crosscheck._backends import framework_named, placements
from crosscheck._backends.devices import placed_device
from crosscheck._cli.main import main
from crosscheck._report.table import where_line

torch = pytest.importorskip("torch")
state = pytest.importorskip("crosscheck.backends.torch.state")
environment = pytest.importorskip("crosscheck.backends.torch.environment")

no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")


def torch_placement(**given: str):
    (record,) = [p for p in placements({f"torch_{k}": v for k, v in given.items()}) if p.framework == "torch"]
    return record


def switches() -> tuple[bool, bool, bool]:
    return (
        torch.backends.cuda.matmul.allow_tf32,
        torch.backends.cudnn.allow_tf32,
        torch.are_deterministic_algorithms_enabled(),
    )


def test_the_switches_asked_for_are_in_effect_inside_a_call_and_put_back_after():
    before = switches()
    asked = torch_placement(matmul_tf32="on", cudnn_tf32="off", deterministic="on")
    with state.placed(asked):
        assert switches() == (True, False, True)
    assert switches() == before
    with state.placed(asked.at_highest()):  # the classification's highest: TF32 off for both
        assert switches()[:2] == (False, False)
    assert switches() == before


def test_a_device_asked_for_is_the_sides_for_the_call_and_nothing_otherwise():
    assert placed_device("torch") is None
    with state.placed(torch_placement(device="cpu")):
        assert placed_device("torch") == "cpu"
        assert environment.side()["device"] == "cpu"
    with state.placed(torch_placement()):
        assert placed_device("torch") is None
    assert placed_device("torch") is None


@no_cuda
def test_cuda_where_pytorch_has_none_is_refused_in_one_line_before_the_run(capsys):
    with pytest.raises(ValueError, match=r"^`torch_device` cuda: PyTorch has no CUDA device") as api:
        crosscheck.Execution(torch_device="cuda")
    assert "\n" not in str(api.value)
    with pytest.raises(ValueError, match=r"^`torch_device` cuda: PyTorch has no CUDA device"):
        crosscheck.run(layers=1, dim=2, batch=2, torch_device="cuda")  # the flat alias's keyword
    assert main(["run", "--layers", "1", "--dim", "2", "--batch", "2", "--torch-device", "cuda"]) == 2
    assert capsys.readouterr().err.strip() == f"crosscheck: error: {api.value}"
    with pytest.raises(RuntimeError, match="no CUDA device"):  # a worker that makes its records again
        with state.placed(torch_placement(device="cuda")):
            pass


def test_the_where_line_names_the_cuda_card_and_its_tf32_switches(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Simulated H200")
    monkeypatch.setattr(state, "unavailable", lambda placement: "")
    with state.placed(torch_placement(device="cuda", matmul_tf32="on")):
        found = environment.side()
    assert found["platform"] == "cuda" and found["device_kind"] == "Simulated H200"
    assert (found["matmul_tf32"], found["cudnn_tf32"]) == ("on", str("on" if switches()[1] else "off"))
    line = where_line({"torch": types.SimpleNamespace(name="torch", info=found)})  # a row, as read
    assert line.startswith("where: `torch` on cuda (Simulated H200), float32 matmul precision")
    assert "TF32 products on" in line


def test_the_stacks_adapters_say_the_host_whatever_the_placement(monkeypatch):
    stack = pytest.importorskip("crosscheck.backends.torch.stack")
    monkeypatch.setattr(state, "unavailable", lambda placement: "")
    with state.placed(torch_placement(device="cuda")):
        assert stack.TorchBackend().info()["platform"] == "cpu"


def test_pytorchs_declaration_names_its_settings_and_their_highest_and_host():
    declared = framework_named("torch")
    assert declared is not None
    assert {s.name: (s.highest, s.host) for s in declared.placement} == {
        "device": (None, "cpu"),
        "matmul_tf32": ("off", None),
        "cudnn_tf32": ("off", None),
        "deterministic": (None, None),
    }


def test_the_switches_asked_for_import_no_pytorch_into_a_run_without_it():
    """A JAX-only run's classification re-run at every side's highest (PyTorch's TF32 off) leaves PyTorch
    unimported: its switches are set only where PyTorch is imported already (a PyTorch backend is
    loaded before its calls)."""
    code = """
        import sys
        from crosscheck._backends import placements
        from crosscheck._engine.call import placed
        with placed(placements({"torch_matmul_tf32": "off", "torch_device": "cpu"})):
            pass
        print("torch" in sys.modules)
    """
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "False"
