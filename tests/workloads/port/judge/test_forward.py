"""The forward check of a port (``quantity="output"``, ``--quantity output``): module outputs against
PyTorch's forward with the gradient check's measured tolerances and verdict, no gradient and no oracle.
A tiny linen port (healthy, and with a LayerNorm epsilon planted), the example transformer's swapped
queries and keys through the command line, a PyTorch side that keeps state (nothing compared: fails),
and the one-line refusals (another workload, another reference)."""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest

import crosscheck
from crosscheck._cli.main import main
from crosscheck._report.report import FORWARD_ONLY

pytestmark = pytest.mark.skipif(
    any(importlib.util.find_spec(m) is None for m in ("flax", "torch")), reason="needs flax and torch"
)


def _port(*, ln_eps=1e-5, stateful=False):
    import flax.linen as nn
    import jax
    import torch

    class TorchNet(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.ln, self.fc2 = torch.nn.Linear(3, 6), torch.nn.LayerNorm(6), torch.nn.Linear(6, 2)
            self.calls = 0

        def forward(self, x):
            self.calls += stateful  # a module that keeps state between calls
            return self.fc2(torch.nn.functional.gelu(self.ln(self.fc1(x)), approximate="tanh")) + self.calls

    class FlaxNet(nn.Module):
        @nn.compact
        def __call__(self, x):
            h = nn.LayerNorm(epsilon=ln_eps, name="ln")(nn.Dense(6, name="fc1")(x))
            return nn.Dense(2, name="fc2")(jax.nn.gelu(h, approximate=True))

    torch.manual_seed(0)
    x = np.random.default_rng(0).standard_normal((8, 3))
    return crosscheck.Port(name="tiny", torch=TorchNet().eval(), jax=FlaxNet(), inputs={"x": x})


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_healthy_port_passes_on_module_outputs_alone(dtype):
    report = crosscheck.check(_port(), quantity="output", dtype=dtype)
    assert report.passed, report.problems
    data = report.to_dict()
    assert data["quantity"] == "output" and data["reference"] == "torch"
    rows = {c["parameter"] for c in data["comparisons"]}
    assert rows == {"fc1 (output)", "ln (output)", "fc2 (output)", "(model) (output)"}  # no gradient row
    port = report.backends["jax"].notes["port"]
    assert port["starts_in"] == "nowhere"
    assert "no gradient was computed, so a bug only in the backward pass is not seen" in port["text"]
    # what --quiet keeps besides PASSED; a float32 pass also says what float32's rounding hides
    float32 = "a bug that moves the module outputs by less is not seen in float32: check in float64 too"
    float32 += " (--dtype float64)"
    said = [f"`jax`: {float32}"] if dtype == "float32" else []
    assert report.caveats() == [*said, f"`jax`: {FORWARD_ONLY}"]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_ports_capture_is_compiled_once_per_precision(dtype):
    """The check captures the port three times (its records at the case's dtype, their repeat, the re-run
    in the other dtype): one compiled pass per precision, the repeat running the first's again (each
    capture compiled its own: three compilations of the whole forward pass)."""
    import jax

    compiled: list[str] = []

    def listen(event, seconds, *, fun_name="", **_):
        if event == "/jax/core/compile/backend_compile_duration" and "linen_pass" in fun_name:
            compiled.append(fun_name)

    jax.monitoring.register_event_duration_secs_listener(listen)
    try:
        report = crosscheck.check(_port(), quantity="output", dtype=dtype)
    finally:
        jax.monitoring.unregister_event_duration_listener(listen)
    assert report.passed, report.problems
    assert len(compiled) == 2, compiled


def test_pytorch_runs_four_forward_passes_in_a_forward_check():
    """Its proof that it keeps no state (two calls), its module capture at the case's dtype and its re-run
    in the other, each capture's hooks recording every module in one pass; the mapping's proof of a head
    order ran one more, for a table with no head rows to prove (nothing measured with it)."""
    import torch

    port = _port()
    passes: list[torch.dtype] = []
    port.torch.register_forward_hook(lambda module, args, out: passes.append(out.dtype))
    report = crosscheck.check(port, quantity="output", dtype="float32")
    assert report.passed, report.problems
    assert passes == [torch.float32, torch.float32, torch.float32, torch.float64]


def test_a_planted_forward_bug_is_located_where_the_full_check_locates_it():
    buggy = _port(ln_eps=0.1)
    forward = crosscheck.check(buggy, quantity="output")
    full = crosscheck.check(buggy, reference="torch")
    assert not forward.passed and not full.passed
    where = forward.backends["jax"].notes["port"]
    assert where["starts_in"] == "forward" and where["module"] == "ln"
    assert full.backends["jax"].notes["port"]["module"] == "ln"


def test_a_bug_only_in_the_backward_pass_passes_the_forward_check_and_says_what_it_cannot_see(capsys):
    workload = "examples.port.convnet:straight_through_relu"  # exact forward, derivative 1 everywhere
    assert main(["run", "--workload", workload, "--quantity", "output", "--no-isolate", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("PASSED") and "a bug only in the backward pass is not seen" in out


def test_a_pytorch_side_that_keeps_state_fails_the_run_with_nothing_compared():
    report = crosscheck.check(_port(stateful=True), quantity="output")
    assert not report.passed
    assert report.comparisons == []
    assert "second call" in (report.backends["torch"].error or "")


def test_the_cli_locates_the_transformers_swapped_queries_and_keys(tmp_path, capsys):
    out = tmp_path / "r.json"
    workload = "examples.port.transformer_linen:swapped_qk"
    status = main(["run", "--workload", workload, "--quantity", "output", "--no-isolate", "--json", str(out)])
    assert status == 1
    data = json.loads(out.read_text())
    assert data["quantity"] == "output" and not data["passed"]
    assert data["backends"]["jax"]["notes"]["port"]["module"] == "layers.0.self_attn"
    assert "a forward check" in capsys.readouterr().out


def _train():
    pytest.importorskip("optax")
    from examples.port import optimizers

    return optimizers.train(_port(), steps=1)


@pytest.mark.parametrize(
    ("workload", "message"),
    [
        (
            lambda: crosscheck.Stack(layers=2, dim=3),
            "workload `stack` is not one: it checks `quantity='grad'`, `quantity='hvp'`",
        ),
        (lambda: "examples.healthy:tanh_mlp", "workload `tanh-mlp` is not one: it checks `quantity='grad'`."),
        (
            _train,
            "is not one: it checks `quantity='update'`; the module outputs of the port it trains are checked",
        ),
    ],
    ids=["stack", "workload", "train"],
)
def test_another_workload_is_refused_in_one_line_naming_ports(workload, message):
    with pytest.raises(ValueError, match=r"is the check of a crosscheck\.Port") as error:
        crosscheck.check(workload(), quantity="output", execution=crosscheck.Execution(isolate=False))
    assert message in str(error.value) and "\n" not in str(error.value)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--workload", "stack"], "`--quantity output` is the check of a crosscheck.Port"),
        (["--workload", "examples.healthy:tanh_mlp"], "workload `tanh-mlp` is not one"),
        (
            ["--workload", "examples.port.transformer_linen:port", "--reference", "numpy-fd"],
            "`--reference numpy-fd` does not apply to `--quantity output`: the forward check compares the "
            "port's module outputs with PyTorch's forward",
        ),
        (["--workload", "examples.port.transformer_linen:port", "--plot", "p.png"], "not available"),
    ],
    ids=["stack", "workload", "numpy-fd", "plot"],
)
def test_the_cli_refuses_in_one_line(args, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["run", "--quantity", "output", "--no-isolate", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


def test_the_api_refuses_the_oracle_as_reference():
    with pytest.raises(ValueError, match=r"`reference='numpy-fd'` does not apply to `quantity='output'`"):
        crosscheck.check(_port(), quantity="output", reference="numpy-fd")
