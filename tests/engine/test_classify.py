"""A failure with the JAX side on an accelerator, classified by controlled re-runs (at ``highest``, on the
host CPU), simulated on the CPU (CI has no accelerator).

The simulated TPU: ``environment.side`` says ``tpu`` unless the JAX side is placed on the host CPU, and
the port's products round their inputs at JAX's default matmul precision (to bfloat16, or to a few bits
for a chip coarser than its model); at ``highest`` they are float32's. A healthy port whose bfloat16
rounding is amplified fails at the default precision, passes at ``highest``: PASSED, the default run's
failure said; a port bug fails everywhere and is located by the CPU run; a device whose elementwise
function is off at every precision is named, not the port. What the reduced precision may explain is
tested in ``test_classify_model.py``.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import crosscheck

torch = pytest.importorskip("torch")
jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
nn = pytest.importorskip("flax.linen")

from simulated_device import TorchMLP as TorchMLPOf  # noqa: E402
from simulated_device import bfloat16_dot as fine_dot  # noqa: E402
from simulated_device import mlp_port, near_port, on_chip, pretend_tpu, rounded  # noqa: E402

from crosscheck._engine import classify  # noqa: E402

WIDTH, HIDDEN, OUT = 32, 64, 16


def chip_dot(lhs, rhs, dimension_numbers, precision=None, preferred_element_type=None, **kwargs):
    """A product's inputs as the simulated chip rounds them at the default precision: 4 significant bits
    (3 of mantissa)."""
    lhs, rhs = rounded(lhs, 3), rounded(rhs, 3)
    return jax.lax.dot_general(lhs, rhs, dimension_numbers, precision=precision)


def TorchMLP() -> torch.nn.Module:
    return TorchMLPOf(WIDTH, HIDDEN, OUT)


class FlaxMLP(nn.Module):
    shift: float = 0.0  # a planted bug: the output off by this much
    tanh_ulps: float = 0.0  # the chip's tanh off by this much of float32's unit, at every precision

    @nn.compact
    def __call__(self, x):
        h = jnp.tanh(nn.Dense(HIDDEN, name="fc1", dot_general=chip_dot)(x))
        if self.tanh_ulps and h.dtype == jnp.float32:  # the chip's arithmetic: the same program elsewhere
            h = h * jnp.float32(1 + self.tanh_ulps * 2.0**-24 if on_chip() else 1.0)
        return nn.Dense(OUT, name="fc2", dot_general=chip_dot)(h) + self.shift


def _port(**planted):
    x = np.random.default_rng(3).standard_normal((16, WIDTH)).astype(np.float32)
    torch.manual_seed(0)
    return crosscheck.Port(name="mlp", torch=TorchMLP().eval(), jax=FlaxMLP(**planted), inputs={"x": x})


@pytest.fixture
def on_a_tpu(monkeypatch):
    """The JAX side says it runs on a TPU unless placed on the host CPU."""
    pretend_tpu(monkeypatch)


def _run(port, **kwargs):
    return crosscheck.run(workload=port, reference="torch", backends=["jax"], **kwargs)


def test_a_healthy_port_that_fails_at_the_default_precision_passes_at_highest_and_says_so(on_a_tpu):
    """Two close products subtracted: the chip's bfloat16 products, 100 times amplified, fail the flat
    permit as asked; at `highest` it agrees, and the difference is what the device model makes."""
    report = _run(near_port(WIDTH, HIDDEN, OUT))
    assert report.passed, report.problems
    found = report.classification
    assert found["kind"] == "precision"
    assert "within what the device's products, modelled on this case on the host" in found["text"]
    assert [r["run"] for r in found["runs"]] == ["as asked", "highest"]
    first, second = found["runs"]
    assert not first["passed"] and first["platform"] == "tpu" and first["problems"]
    assert second["passed"] and second["matmul_precision"] == "highest"
    assert "not the port" in found["text"] and "random draw" not in found["text"]
    said = report.to_dict()
    assert said["classification"]["kind"] == "precision"


def test_a_port_bug_fails_everywhere_and_is_located_by_the_host_cpu_run(on_a_tpu):
    report = _run(_port(shift=0.5))
    assert not report.passed
    found = report.classification
    assert found["kind"] == "port" and [r["run"] for r in found["runs"]] == [
        "as asked",
        "highest",
        "host CPU",
    ]
    assert report.backends["jax"].info["platform"] == "cpu"  # the verdict is the CPU run's
    assert report.backends["jax"].notes["port"]["starts_in"] == "forward"


def test_a_device_whose_arithmetic_differs_at_highest_too_is_named_not_the_port(on_a_tpu):
    report = _run(_port(tanh_ulps=2.0**18))
    assert not report.passed
    found = report.classification
    assert found["kind"] == "device" and found["runs"][-1]["passed"]
    assert "the device's arithmetic decided" in found["text"]


def test_a_failure_on_a_cpu_is_not_re_run():
    report = _run(_port(shift=0.5))
    assert not report.passed and report.classification == {}
    assert classify.accelerated(report) is None


def test_what_a_classification_says_is_printed_before_the_verdict(on_a_tpu):
    from rich.console import Console

    report = _run(near_port(WIDTH, HIDDEN, OUT))
    console = Console(record=True, width=400)
    report.render(console)
    text = console.export_text()
    assert "classified by re-runs: the JAX side on a TPU (TPU v5 lite)" in text
    assert text.rstrip().splitlines()[-1].startswith("PASSED")


def test_the_run_s_precision_is_the_one_its_device_model_reads(on_a_tpu):
    """``jax_precision="highest"`` for the run (not the process): the device model is ``highest``'s, whose
    permit a tanh off by 2^18 float32 units exceeds; read outside the run's settings it was the default's,
    16 times wider, and the check passed."""
    report = _run(_port(tanh_ulps=2.0**18), jax_precision="highest")
    assert not report.passed
    assert "at JAX's highest matmul precision" in report.backends["jax"].notes["port"]["text"]


def test_a_failure_of_another_side_is_not_the_devices_to_classify():
    """A PyTorch candidate that fails beside a JAX side on a TPU that agrees: no re-run, no blame on the
    device or the port's JAX side."""
    from types import SimpleNamespace as NS

    tpu = {"platform": "tpu", "device_kind": "TPU v5 lite", "matmul_precision": "default"}
    jax_side = NS(name="jax", role="candidate", info=tpu, verdict=None)
    torch_side = NS(name="torch", role="candidate", info={"platform": "cpu"}, verdict=None)
    report = NS(
        passed=False,
        interrupted=False,
        halted=None,
        backends={"jax": jax_side, "torch": torch_side},
        comparisons=[NS(passed=True, backend="jax"), NS(passed=False, backend="torch")],
    )
    again = []
    assert classify.classified(NS(progress=None), report, again.append) is report
    assert again == []
    report.comparisons[0].passed = False  # the JAX side's own comparison fails: re-run
    with pytest.raises(AttributeError):  # the stub request has no execution: the re-run was asked for
        classify.classified(NS(progress=None), report, again.append)


def _fine(shift=0.0):
    return mlp_port("fine", WIDTH, HIDDEN, OUT, shift)


def test_a_pass_at_the_default_precision_is_confirmed_at_highest(on_a_tpu):
    report = _run(_fine())
    assert report.passed, report.problems
    found = report.classification
    assert found["kind"] == "confirmed" and [r["run"] for r in found["runs"]] == ["as asked", "highest"]
    assert all(r["passed"] for r in found["runs"])
    assert report.backends["jax"].info["matmul_precision"] == "highest"  # the check is that run's


def test_a_bug_the_default_precision_hides_fails_at_its_module(on_a_tpu):
    """A difference smaller than bfloat16 products can see (a layer-norm epsilon, an exact GELU for the
    tanh one, on a TPU v5e at the default precision) passed there; now the `highest` and host CPU
    re-runs find it, and the verdict is the CPU run's, located."""
    report = _run(_fine(shift=3e-3))
    assert not report.passed
    found = report.classification
    assert found["kind"] == "hidden" and [r["run"] for r in found["runs"]] == [
        "as asked",
        "highest",
        "host CPU",
    ]
    assert found["runs"][0]["passed"] and not found["runs"][1]["passed"]
    assert "smaller than the reduced precision can see" in found["text"]
    assert report.backends["jax"].notes["port"]["starts_in"] == "forward"


class FlaxOffTanh(nn.Module):
    """Bfloat16 products within the model, and the chip's tanh off by a share of its value at every
    precision: within what the default precision hides, beyond what `highest` permits."""

    off: float = 2.0**-5

    @nn.compact
    def __call__(self, x):
        h = jnp.tanh(nn.Dense(HIDDEN, name="fc1", dot_general=fine_dot)(x))
        if h.dtype == jnp.float32:  # the chip's arithmetic: the same program on the host CPU
            h = h * jnp.float32(1 + self.off if on_chip() else 1.0)
        return nn.Dense(OUT, name="fc2", dot_general=fine_dot)(h)


def test_a_pass_whose_highest_run_differs_on_the_device_alone_stands_and_names_the_device(on_a_tpu):
    x = np.random.default_rng(3).standard_normal((16, WIDTH)).astype(np.float32)
    torch.manual_seed(0)
    report = _run(crosscheck.Port(name="off", torch=TorchMLP().eval(), jax=FlaxOffTanh(), inputs={"x": x}))
    found = report.classification
    assert [r["run"] for r in found["runs"]] == ["as asked", "highest", "host CPU"]
    assert [r["passed"] for r in found["runs"]] == [True, False, True]
    assert report.passed and found["kind"] == "device"
    assert "the check as asked passed, and stands" in found["text"] and " too " not in found["text"]


class SaysTpu:
    """A stack backend whose ``info`` says it runs on a TPU at JAX's default precision whatever it is
    asked (it never reports ``highest``, nor the host CPU); its gradient JAX's own, times ``factor``.
    Past ``cap`` calls it raises, so a classification that never ends fails instead of hanging."""

    def __init__(self, factor: float = 1.0, cap: int = 60) -> None:
        self.name, self.calls, self.factor, self.cap = "says-tpu", 0, factor, cap
        self.inner = crosscheck.load_backend("jax")

    def grad(self, weights, x):
        self.calls += 1
        if self.calls > self.cap:
            raise RuntimeError("called past the cap: the classification re-ran without end")
        return self.inner.grad(weights, x) * self.factor

    def info(self):
        tpu = {"platform": "tpu", "device_kind": "TPU v5 lite", "matmul_precision": "default"}
        return {"framework": "jax", "version": "", **tpu}


def test_a_re_run_is_never_classified_again():
    """Each re-run at `highest` was classified again (the check was its own re-run's callback): a backend
    that never reports `highest` hung the run. Now three checks are made, and the re-runs that did not run
    as asked are said, confirming nothing."""
    backend = SaysTpu()
    report = crosscheck.run(backends=[backend], dim=8, layers=2, batch=4)
    found = report.classification
    assert [r["run"] for r in found["runs"]] == ["as asked", "highest", "host CPU"]
    assert backend.calls == 6  # three checks, each the gradient and its float64 re-run
    assert [r["made"] for r in found["runs"]] == [True, False, False]
    assert [r["matmul_precision"] for r in found["runs"]] == ["default"] * 3  # each its own record
    assert report.passed and found["kind"] == "unconfirmed"
    assert "not made as asked" in found["text"] and "was not looked at" in found["text"]


def test_a_failure_whose_re_runs_did_not_run_as_asked_is_unclassified_and_fails():
    backend = SaysTpu(factor=1.01)
    report = crosscheck.run(backends=[backend], dim=8, layers=2, batch=4)
    found = report.classification
    assert not report.passed and found["kind"] == "unclassified" and backend.calls == 6
    assert report.problems == found["runs"][0]["problems"]  # the as-asked verdict stands


def test_each_run_s_record_is_its_own_and_a_port_bug_costs_three_checks(on_a_tpu, monkeypatch):
    """A port bug present everywhere: the `highest` re-run was classified again and made a host CPU run of
    its own (four checks), and its record then had no platform and the CPU run's problems."""
    from crosscheck._engine import execute

    driven = []
    drive = execute.drive
    monkeypatch.setattr(execute, "drive", lambda planned: driven.append(drive(planned)) or driven[-1])
    report = _run(_port(shift=0.5))
    found = report.classification
    assert len(driven) == 3 and found["kind"] == "port"
    asked, highest, cpu = found["runs"]
    assert (asked["platform"], asked["matmul_precision"], asked["passed"]) == ("tpu", "default", False)
    assert (highest["platform"], highest["matmul_precision"], highest["made"]) == ("tpu", "highest", True)
    assert (cpu["platform"], cpu["made"]) == ("cpu", True)
    assert [r["problems"] for r in found["runs"]] == [r.problems for r in driven]


class FlaxDeviceBranch(nn.Module):
    """A port with a code path only the chip takes (as a port branches on `jax.default_backend()` to a
    kernel only a TPU has): there its output is off by ``error``; on the host CPU the other path, right."""

    error: float = 0.05

    @nn.compact
    def __call__(self, x):
        h = jnp.tanh(nn.Dense(HIDDEN, name="fc1", dot_general=fine_dot)(x))
        out = nn.Dense(OUT, name="fc2", dot_general=fine_dot)(h)
        if on_chip():
            out = out * (1 + self.error)
        return out


def _branching(error):
    x = np.random.default_rng(3).standard_normal((16, WIDTH)).astype(np.float32)
    torch.manual_seed(0)
    return crosscheck.Port(
        name="branch", torch=TorchMLP().eval(), jax=FlaxDeviceBranch(error), inputs={"x": x}
    )


@pytest.mark.parametrize("error", [0.05, 0.5], ids=["5%", "50%"])
def test_a_code_path_only_the_device_takes_is_judged_on_the_device_alone(on_a_tpu, error):
    """The host CPU's re-run took the other path, agreed, and cleared the device: a 5 % error on the
    device's path PASSED (kind `device`), a 50 % one FAILED blamed on the device. The programs differ: the
    host run clears and explains nothing, and the device's own runs fail."""
    report = _run(_branching(error))
    found = report.classification
    assert not report.passed and found["kind"] == "program"
    assert re.search(
        r"runs other code on the device \(`mul` \(\d+ on the device, \d+ on the host CPU\)\)", found["text"]
    )
    assert "its device path was judged on the device's own arithmetic alone" in found["text"]
    assert "device's arithmetic decided" not in found["text"]
    assert found["runs"][-1]["run"] == "host CPU" and found["runs"][-1]["same_program"] is False
    assert report.backends["jax"].info["platform"] == "tpu"  # the verdict is a device run's


def test_the_same_program_on_the_host_still_names_the_device(on_a_tpu):
    """The chip's arithmetic is no other program: the host run of the same program clears the device."""
    report = _run(_port(tanh_ulps=2.0**18))
    found = report.classification
    assert found["kind"] == "device" and [r["same_program"] for r in found["runs"]] == [None, True, True]
    program = report.backends["jax"].notes["program"]
    assert program["operations"]["dot_general"] >= 2 and program["by_platform"] == []
