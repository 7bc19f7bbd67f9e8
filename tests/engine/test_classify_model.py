"""What a reduced precision may explain, in a classification on a simulated TPU: the device model of its
products on the case (``crosscheck._compare.modelled``, the JAX side's ``modelled``), made with the
as-asked run, bounds the difference a ``highest`` re-run that agrees may call the reduced precision's
(``precision``, ``confirmed``); beyond it the check fails (``beyond``), and without a model a failure is
not explained (``unmodelled``)."""

from __future__ import annotations

import numpy as np
import pytest

import crosscheck

torch = pytest.importorskip("torch")
jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
nn = pytest.importorskip("flax.linen")

from simulated_device import TorchMLP, bfloat16_dot, on_chip, pretend_tpu, rounded  # noqa: E402

WIDTH, HIDDEN, OUT = 32, 64, 16


@pytest.fixture
def on_a_tpu(monkeypatch):
    pretend_tpu(monkeypatch)


def chip_dot(lhs, rhs, dimension_numbers, precision=None, preferred_element_type=None, **kwargs):
    """A chip coarser than its model: products' inputs kept to 4 significant bits at the default precision."""
    return jax.lax.dot_general(rounded(lhs, 3), rounded(rhs, 3), dimension_numbers, precision=precision)


class FlaxMLP(nn.Module):
    """``fc2(tanh(fc1(x)))`` on the simulated chip (``dot``), its output times ``factor`` where the chip
    computes at JAX's default precision: a difference that precision alone makes, in the chip's arithmetic
    (the same program everywhere: not another code path)."""

    factor: float = 1.0
    coarse: bool = False

    @nn.compact
    def __call__(self, x):
        dot = chip_dot if self.coarse else bfloat16_dot
        out = nn.Dense(OUT, name="fc2", dot_general=dot)(
            jnp.tanh(nn.Dense(HIDDEN, name="fc1", dot_general=dot)(x))
        )
        low = on_chip() and jax.config.jax_default_matmul_precision is None and out.dtype == jnp.float32
        return out * jnp.asarray(self.factor if low else 1.0, out.dtype)


def _run(**planted):
    x = np.random.default_rng(3).standard_normal((16, WIDTH)).astype(np.float32)
    torch.manual_seed(0)
    port = crosscheck.Port(
        name="mlp", torch=TorchMLP(WIDTH, HIDDEN, OUT).eval(), jax=FlaxMLP(**planted), inputs={"x": x}
    )
    return crosscheck.run(workload=port, reference="torch", backends=["jax"])


@pytest.mark.parametrize(("factor", "asked"), [(1.05, True), (2.0, False)], ids=["5%", "x2"])
def test_a_difference_only_the_default_precision_makes_is_beyond_its_rounding(on_a_tpu, factor, asked):
    """A 5 % difference made only at the default precision passed as asked (within the flat permit) and
    was "confirmed" at `highest`; a factor 2 failed as asked and was classified `precision`, PASSED. A
    bfloat16 product cannot make either: FAILED, said so."""
    report = _run(factor=factor)
    found = report.classification
    assert [r["run"] for r in found["runs"]] == ["as asked", "highest"]
    assert found["runs"][0]["passed"] is asked and found["runs"][1]["passed"]
    assert not report.passed and found["kind"] == "beyond"
    assert "a difference the reduced precision cannot explain" in found["problem"]
    assert found["problem"] in report.problems
    model = report.backends["jax"].notes["device_model"]  # the as-asked run's: the verdict is its
    assert model["unit"] == 2.0**-8 and set(model["parameters"]) == {
        "fc1.weight",
        "fc1.bias",
        "fc2.weight",
        "fc2.bias",
    }


def test_a_chip_coarser_than_its_model_is_not_the_reduced_precision(on_a_tpu):
    """Products at 4 significant bits where the model of a TPU's default precision rounds to bfloat16's 8:
    agreeing at `highest` does not make it the precision's."""
    report = _run(coarse=True)
    found = report.classification
    assert not report.passed and found["kind"] == "beyond"
    assert "a median" in found["problem"] and "units against" in found["problem"]


def test_a_healthy_port_at_the_default_precision_is_within_its_model(on_a_tpu):
    report = _run()
    found = report.classification
    assert report.passed and found["kind"] == "confirmed"
    assert "is within what the device's products, modelled on this case" in found["text"]
    model = found["runs"][0]["device_model"]  # the report is the `highest` run's: the model is the run's
    assert model["unit"] == 2.0**-8 and "device_model" not in found["runs"][1]
    assert all(asked <= 4 * made + 2 for asked, made in model["parameters"].values())


class TpuStack:
    """A stack backend on a (said) TPU without a device model (no ``modelled``): its gradient JAX's own
    at `highest`, 1.5 times it at the default precision."""

    name = "tpu-stack"

    def __init__(self) -> None:
        self.inner = crosscheck.load_backend("jax")

    def grad(self, weights, x):
        factor = 1.0 if jax.config.jax_default_matmul_precision else 1.5
        return self.inner.grad(weights, x) * (factor if weights.dtype == np.float32 else 1.0)

    def info(self):
        precision = jax.config.jax_default_matmul_precision or "default"
        return {
            "framework": "jax",
            "platform": "tpu",
            "device_kind": "TPU v5 lite",
            "matmul_precision": str(precision),
        }


def test_a_failure_whose_device_products_are_not_modelled_is_not_explained():
    """Without a model of the device's products the difference is not shown to be the precision's: it was
    PASSED as `precision`; it fails as asked, said."""
    report = crosscheck.run(backends=[TpuStack()], dim=8, layers=2, batch=4)
    found = report.classification
    assert [r["passed"] for r in found["runs"]] == [False, True]
    assert not report.passed and found["kind"] == "unmodelled"
    assert "were not modelled for this check" in found["text"]
