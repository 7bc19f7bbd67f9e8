"""The JAX side on an accelerator, simulated on the CPU (CI has none): a TPU's float32 products at JAX's
default matmul precision take their inputs rounded to bfloat16 (one pass), its float64 ones do not.

A healthy port there differs from its own float64 re-run by the device's arithmetic (~2e-3 of an
output's scale), which float32's permit calls "not the same computation ... a random draw made again";
judged with the device's arithmetic (``device.Arithmetic``), it passes and says what that arithmetic
hides. A port bug larger than the device's rounding still fails at its module; the same port on a CPU
is judged as before.
"""

from __future__ import annotations

import numpy as np
import pytest

import crosscheck
from crosscheck._compare import device

torch = pytest.importorskip("torch")
jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
nn = pytest.importorskip("flax.linen")

import simulated_device  # noqa: E402
from simulated_device import bfloat16_dot as tpu_dot  # noqa: E402

from crosscheck._workloads.model.workload import _framework_backend  # noqa: E402

WIDTH, HIDDEN, OUT = 48, 96, 24


def TorchMLP() -> torch.nn.Module:
    return simulated_device.TorchMLP(WIDTH, HIDDEN, OUT)


def _port(shift=0.0):
    return simulated_device.mlp_port("mlp", WIDTH, HIDDEN, OUT, shift)


@pytest.fixture
def on_a_tpu(monkeypatch):
    """The JAX side says it computed on a TPU at the default precision."""
    tpu = device.Arithmetic("tpu", "default", "TPU v5 lite", framework="jax")
    adapter = type(_framework_backend("jax", lambda params, inputs: 0.0))  # the class a port's side is
    monkeypatch.setattr(adapter, "arithmetic", lambda self: tpu)
    return tpu


def _run(port):
    return crosscheck.run(workload=port, reference="torch", backends=["jax"])


def test_a_healthy_port_on_a_tpu_passes_within_its_arithmetic_and_says_what_it_hides(on_a_tpu):
    report = _run(_port())
    assert report.passed, report.problems
    verdict = report.backends["jax"].notes["port"]["text"]
    assert "random draw" not in verdict
    assert "ran on a TPU (TPU v5 lite) at JAX's default matmul precision" in verdict
    assert "a difference smaller than about 6.2e-02 of a value's scale is not seen" in verdict


def test_the_same_port_said_to_run_on_a_cpu_is_not_the_same_computation():
    """Without the device's arithmetic, the bfloat16 products are another computation (the false alarm
    a TPU gave every healthy port)."""
    report = _run(_port())
    assert not report.passed
    text = "\n".join(c.message for c in report.comparisons if not c.passed)
    assert "is not the same computation" in text and "random draw" in text


def test_a_port_bug_beyond_the_devices_rounding_still_fails_at_its_module(on_a_tpu):
    report = _run(_port(shift=0.5))
    assert not report.passed
    port = report.backends["jax"].notes["port"]
    assert port["starts_in"] == "forward" and "random draw" not in port["text"]


@jax.custom_vjp
def pair_max(h):
    """The max over pairs of units, each repeated twice (a max pooling of width 2, stride 2, upsampled)."""
    return jnp.repeat(h.reshape(h.shape[0], -1, 2).max(axis=-1), 2, axis=-1)


def _pair_max_fwd(h):
    return pair_max(h), h


def _pair_max_bwd(h, g):
    """A TPU has no float64 max-pooling gradient (``select_and_scatter``): simulated, the float64
    backward pass fails unless placed on the host CPU."""
    if h.dtype == jnp.float64 and jax.config.jax_default_device is None:
        raise NotImplementedError("UNIMPLEMENTED: select-and-scatter in f64 on this device")
    return (jax.vjp(lambda a: jnp.repeat(a.reshape(a.shape[0], -1, 2).max(axis=-1), 2, axis=-1), h)[1](g)[0],)


pair_max.defvjp(_pair_max_fwd, _pair_max_bwd)


class FlaxPooled(nn.Module):
    """The MLP with a max over pairs of hidden units, whose float64 gradient the device cannot make."""

    @nn.compact
    def __call__(self, x):
        h = pair_max(jnp.tanh(nn.Dense(HIDDEN, name="fc1", dot_general=tpu_dot)(x)))
        return nn.Dense(OUT, name="fc2", dot_general=tpu_dot)(h)


class TorchPooled(simulated_device.TorchMLP):
    def __init__(self):
        super().__init__(WIDTH, HIDDEN, OUT)

    def forward(self, x):
        h = torch.tanh(self.fc1(x))
        h = h.reshape(h.shape[0], -1, 2).amax(-1).repeat_interleave(2, -1)
        return self.fc2(h)


def test_a_float64_re_run_the_device_cannot_compute_is_made_on_the_host_cpu_and_said(on_a_tpu, monkeypatch):
    """Without the host CPU's re-run, the gradient is judged by float32's fallback bound, which a TPU's
    bfloat16 products exceed: the healthy port failed at its first layer (the convnet on a TPU v5e).
    Simulated on a device whose float64 is native (on a TPU it is made on the host from the start)."""
    monkeypatch.setattr(device, "EMULATED_FLOAT64", {})
    x = np.random.default_rng(3).standard_normal((16, WIDTH)).astype(np.float32)
    torch.manual_seed(0)
    port = crosscheck.Port(name="pooled", torch=TorchPooled().eval(), jax=FlaxPooled(), inputs={"x": x})
    report = _run(port)
    assert report.passed, report.problems
    said = report.backends["jax"].notes["rounding"]
    assert "float64 re-run failed" in said and "re-run on the host CPU instead" in said


SEEN: list[bool] = []  # FlaxWatched's notes (a linen field would be frozen into a tuple)


class FlaxWatched(nn.Module):
    """The MLP, noting for each float64 product whether it was placed on the host CPU (JAX's default
    device set, as ``--jax-platform cpu`` and ``Call.on_host`` set it) when it was traced."""

    @nn.compact
    def __call__(self, x):
        def dot(lhs, rhs, *args, **kwargs):
            if lhs.dtype == jnp.float64:
                SEEN.append(jax.config.jax_default_device is not None)
            return tpu_dot(lhs, rhs, *args, **kwargs)

        h = jnp.tanh(nn.Dense(HIDDEN, name="fc1", dot_general=dot)(x))
        return nn.Dense(OUT, name="fc2", dot_general=dot)(h)


@pytest.mark.parametrize("quantity", ["grad", "output"])
def test_on_a_tpu_every_float64_re_run_of_the_jax_side_is_made_on_the_host_cpu_and_said(on_a_tpu, quantity):
    """A TPU's float64 is emulated (float32 pairs: float32's exponent range, about 48 bits) and compiles
    slowly (GPT-2 small's float64 capture ran past 220 s on a TPU v5e, 8 s in float32): the references
    the device's float32 results are measured against, the gradient's and the module capture's float64
    re-runs, are made on the host CPU, in IEEE float64, and the report says so."""
    x = np.random.default_rng(3).standard_normal((16, WIDTH)).astype(np.float32)
    torch.manual_seed(0)
    SEEN.clear()
    port = crosscheck.Port(name="watched", torch=TorchMLP().eval(), jax=FlaxWatched(), inputs={"x": x})
    report = crosscheck.run(workload=port, reference="torch", backends=["jax"], quantity=quantity)
    assert report.passed, report.problems
    assert SEEN and all(SEEN), f"{SEEN.count(False)} of {len(SEEN)} float64 products traced on the device"
    notes = report.backends["jax"].notes
    assert "JAX's float64 re-run made on the host CPU: a TPU's float64 is emulated" in notes["port"]["text"]
    if quantity == "grad":
        assert "`jax`'s float64 re-run made on the host CPU" in notes["rounding"]


def test_a_float64_case_on_a_tpu_stays_on_the_device(on_a_tpu):
    """A float64 check asked for on the device is made there: only the re-runs in float64 move."""
    x = np.random.default_rng(3).standard_normal((16, WIDTH))
    torch.manual_seed(0)
    SEEN.clear()
    port = crosscheck.Port(name="watched", torch=TorchMLP().eval(), jax=FlaxWatched(), inputs={"x": x})
    report = crosscheck.run(workload=port, reference="torch", backends=["jax"], dtype="float64")
    assert SEEN and not any(SEEN)
    assert "made on the host CPU" not in report.backends["jax"].notes["port"]["text"]
