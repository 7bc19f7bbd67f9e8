"""The brief's stack with its JAX side on an accelerator, simulated on the CPU (CI has none): a TPU's
float32 products at JAX's default matmul precision take their inputs rounded to bfloat16 (one pass),
forward and backward. Judged by float32's rounding model, its gradient fails; judged by the same model at
the device's unit roundoff (``device.Arithmetic``, ``RoundingModel.scaled``), it passes and says what
that arithmetic hides. A wrong entry far beyond that rounding still fails, and a candidate on a CPU is
judged as before.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

import crosscheck
from crosscheck._compare import device

CASE = {"layers": 4, "batch": 8, "dim": 24, "seed": 3, "init": "gaussian"}


def _bf16(a: np.ndarray) -> np.ndarray:
    return a.astype(ml_dtypes.bfloat16).astype(np.float32)


def tpu_grad(weights: np.ndarray, x: np.ndarray) -> np.ndarray:
    """The stack's gradient as a TPU computes it at the default precision: every product's inputs
    rounded to bfloat16, summed in float32."""
    ys, zs = [x.astype(np.float32)], []
    for w in weights:
        zs.append(_bf16(ys[-1]) @ _bf16(w))
        ys.append(np.maximum(zs[-1], 0))
    g, grads = 2 * ys[-1], np.empty_like(weights)
    for k in reversed(range(len(weights))):
        gz = g * (zs[k] > 0)
        grads[k] = _bf16(ys[k]).T @ _bf16(gz)
        g = _bf16(gz) @ _bf16(weights[k]).T
    return grads


class OnATpu:
    """The simulated TPU side: its gradient, and where it says it computed."""

    def __init__(self, plant: float = 0.0, says: bool = True) -> None:
        self.plant, self.says = plant, says

    def grad(self, weights: np.ndarray, x: np.ndarray) -> np.ndarray:
        out = tpu_grad(weights, x)
        out[1, 2, 3] += self.plant * np.max(np.abs(out))
        return out

    def arithmetic(self) -> device.Arithmetic:
        if not self.says:
            raise AttributeError("says nothing")  # as a backend without the capability
        return device.Arithmetic("tpu", "default", "TPU v5 lite", framework="jax")


def _run(backend):
    return crosscheck.run(backends=[backend], **CASE)


def test_the_stack_on_a_tpu_passes_within_its_arithmetic_and_says_what_it_hides():
    report = _run(OnATpu())
    assert report.passed, report.problems
    verdict = report.backends["OnATpu"].verdict
    assert verdict is not None and not verdict.fails
    assert "ran on a TPU (TPU v5 lite) at JAX's default matmul precision" in verdict.text


def test_judged_by_float32_rounding_the_same_gradient_fails():
    report = _run(OnATpu(says=False))
    assert not report.passed


def test_a_wrong_entry_beyond_the_devices_rounding_still_fails():
    report = _run(OnATpu(plant=0.2))
    assert not report.passed
    (comparison,) = report.comparisons
    assert comparison.mismatched >= 1 and "(1, 2, 3)" in comparison.message


def test_a_model_scaled_to_a_device_scales_every_sigma():
    from crosscheck._workloads.stack.rounding import RoundingModel

    model = RoundingModel("float32", [np.ones((2, 3))], np.full((1, 3, 3), 2.0), 64, np.ones((1, 4)))
    scaled = model.scaled(256.0)
    assert scaled.z_sigma[0].max() == 256.0 and scaled.grad_sigma.max() == 512.0
    assert scaled.direction_sigma is not None and scaled.direction_sigma.max() == 256.0
    assert model.scaled(1.0) is model and model.grad_sigma.max() == 2.0
