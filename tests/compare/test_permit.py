"""A candidate never sets its own tolerance (issue 23, part A).

The rounding term of a workload's or port's candidate is measured from its own re-run in the other
precision; an error that exists only in a side's float32 run (or on every call) would be its own
tolerance. Each case below passed before: each is wrong in float32 only, or noisy, and must now fail
with a diagnosis that names the side and the measured ratio; the healthy twin of each still passes.
"""

from __future__ import annotations

import numpy as np
import pytest
from tanh_mlp import SHAPES, jax_loss, numpy_loss

import crosscheck
from crosscheck._compare.terms import PERMIT_ULPS
from crosscheck._workloads.model.ratios import permitted
from crosscheck._workloads.model.rounding import measure

pytest.importorskip("jax")
pytest.importorskip("torch")


def _gelu_np(p, i):
    from scipy.special import erf

    z = i["x"] @ p["w1"] + p["b1"]
    h = 0.5 * z * (1 + erf(z / np.sqrt(2)))
    return float(np.sum((h @ p["w2"]) ** 2))


def _gelu_jax(*, scale32=1.0, tanh32=False):
    def loss(p, i):
        import jax
        import jax.numpy as jnp

        z = i["x"] @ p["w1"] + p["b1"]
        single = z.dtype == jnp.float32
        h = jax.nn.gelu(z, approximate=tanh32 and single) * (scale32 if single else 1.0)
        return jnp.sum((h @ p["w2"]) ** 2)

    return loss


def _torch(*, noise=0.0, scale32=1.0, bfloat16=False, unstable=False):
    def loss(p, i):
        import torch

        class Grad(torch.autograd.Function):  # identity forward; what backward does to the gradient
            @staticmethod
            def forward(ctx, x):
                return x.view_as(x)

            @staticmethod
            def backward(ctx, g):
                if noise:
                    g = g * (1 + noise * torch.randn_like(g))
                if bfloat16 and g.dtype == torch.float32:
                    g = g.to(torch.bfloat16).to(torch.float32)
                return g

        w1 = Grad.apply(p["w1"])
        z = i["x"] @ w1 + p["b1"]
        if unstable:  # a norm's variance as E[z^2] - E[z]^2 of a large mean; the same function in exact math
            z = z + 300.0
            mean = z.mean(-1, keepdim=True)
            var = (z * z).mean(-1, keepdim=True) - mean * mean
            stable = (z - mean).pow(2).mean(-1, keepdim=True)
            z = (z - mean) * torch.sqrt((stable + 1e-3) / (var + 1e-3)) + mean - 300.0
        h = torch.tanh(z)
        if h.dtype == torch.float32:
            h = h * scale32
        return torch.sum((h @ p["w2"]) ** 2)

    return loss


def _workload(name, jax_loss, torch_loss=None, reference=numpy_loss):
    implementations = {"jax": jax_loss} | ({"torch": torch_loss} if torch_loss else {})
    return crosscheck.Workload(
        name=name,
        parameters=SHAPES,
        inputs={"x": (16, 4)},
        reference=reference,
        implementations=implementations,
    )


def _failed_with(report, backend, *needles):
    assert not report.passed, report.problems
    text = "\n".join(
        [report.backends[backend].error or ""]
        + [c.message for c in report.comparisons if c.backend == backend]
    )
    for needle in needles:
        assert needle in text, text


HEALTHY = _workload("healthy", jax_loss, _torch())

WRONG_IN_FLOAT32 = {
    # the false greens: what the side does, the words its failure must carry
    "noisy-backward": (_workload("noisy", jax_loss, _torch(noise=0.01)), "torch", "nondeterministic"),
    "activations-x1.03": (
        _workload("x1.03", jax_loss, _torch(scale32=1.03)),
        "torch",
        "below float32 precision",
    ),
    "bfloat16-gradient": (
        _workload("bf16", jax_loss, _torch(bfloat16=True)),
        "torch",
        "below float32 precision",
    ),
    "gelu-x1.01": (_workload("gelu", _gelu_jax(scale32=1.01), reference=_gelu_np), "jax", "below float32"),
    "tanh-gelu": (_workload("tanh-gelu", _gelu_jax(tanh32=True), reference=_gelu_np), "jax", "below float32"),
    "unstable-layer-norm": (_workload("ln", jax_loss, _torch(unstable=True)), "torch", "below float32"),
}


@pytest.mark.parametrize("reference", [None, "torch"])
def test_the_healthy_twin_passes(reference):
    kwargs = {"reference": reference} if reference else {}
    report = crosscheck.run(workload=HEALTHY, dtype="float32", repeat=3, **kwargs)
    assert report.passed, report.problems


@pytest.mark.parametrize("case", WRONG_IN_FLOAT32)
def test_an_error_in_float32_only_is_never_its_own_tolerance(case):
    workload, backend, words = WRONG_IN_FLOAT32[case]
    report = crosscheck.run(workload=workload, dtype="float32")
    _failed_with(report, backend, words)


def test_a_noisy_reference_backend_is_named_not_its_candidates():
    report = crosscheck.run(
        workload=WRONG_IN_FLOAT32["noisy-backward"][0], dtype="float32", reference="torch"
    )
    assert not report.passed
    assert "below float32 precision" in (report.backends["torch"].error or "")
    assert report.backends["torch"].status == "failed"


def test_the_noisy_side_fails_with_one_call_too():
    report = crosscheck.run(workload=WRONG_IN_FLOAT32["noisy-backward"][0], dtype="float32", repeat=1)
    _failed_with(
        report, "torch", "below float32 precision", "relative (RMS)", "x what float32 rounding permits"
    )


def test_the_repeat_check_says_how_far_two_calls_differ():
    report = crosscheck.run(workload=WRONG_IN_FLOAT32["noisy-backward"][0], dtype="float32", repeat=2)
    error = report.backends["torch"].error or ""
    assert "nondeterministic" in error and "relative (RMS)" in error, error


def test_a_float32_only_bug_in_a_float64_check_is_noted_not_failed():
    # In float64 the side is right: its float32 re-run is off, which is said, and capped.
    report = crosscheck.run(workload=WRONG_IN_FLOAT32["activations-x1.03"][0], dtype="float64")
    assert report.passed, report.problems
    assert (
        "re-run of `w1` is below float32 precision (noted only)" in report.backends["torch"].notes["rounding"]
    )


def test_the_measured_term_is_capped_by_what_float32_permits():
    rng = np.random.default_rng(0)
    wide = {"w": rng.standard_normal((20, 20))}
    narrow = {"w": (wide["w"] * (1 + 0.01 * rng.standard_normal((20, 20)))).astype(np.float32)}
    found = measure(narrow, wide, shapes={"w": (20, 20)}, dtype="float32", name="side")
    permit = permitted(wide, {"w": (20, 20)})["w"]
    assert [e.parameter for e in found.excess] == ["w"]
    assert found.excess[0].ratio > 30  # 1 % against 256 x 6e-8 x (|g| + 2 RMS)
    assert 4 < found.excess[0].bits < 8  # 1 % leaves ~6.6 bits
    assert np.all(np.abs(found.delta["w"]) <= permit)
    honest = {"w": wide["w"].astype(np.float32)}
    assert measure(honest, wide, shapes={"w": (20, 20)}, dtype="float32", name="side").excess == ()


def test_a_kink_flipped_between_the_precisions_is_not_an_excess():
    # One entry off by O(1) (a ReLU decided differently in float32): measured, kept, no diagnosis.
    wide = {"w": np.linspace(1.0, 2.0, 64)}
    narrow = {"w": wide["w"].astype(np.float32)}
    narrow["w"][3] = 0.0
    found = measure(narrow, wide, shapes={"w": (64,)}, dtype="float32", name="side")
    assert found.excess == () and found.term["w"][3] > PERMIT_ULPS * 2.0**-24 * 3


def _port(scale32):
    import jax.numpy as jnp
    import torch

    def fn(params, x):
        h = jnp.tanh(x @ params["fc1"]["w"] + params["fc1"]["b"])
        h = h * (scale32 if h.dtype == jnp.float32 else 1.0)
        return h @ params["fc2"]["w"] + params["fc2"]["b"]

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2)).eval()
    tree = {
        "fc1": {"w": np.zeros((3, 4)), "b": np.zeros(4)},
        "fc2": {"w": np.zeros((4, 2)), "b": np.zeros(2)},
    }
    overrides = {"0.weight": "fc1/w", "0.bias": "fc1/b", "2.weight": "fc2/w", "2.bias": "fc2/b"}
    overrides = {k: (v, "transpose") if k.endswith("weight") else v for k, v in overrides.items()}
    x = {"x": np.random.default_rng(0).standard_normal((5, 3))}
    return crosscheck.Port(
        name="fn",
        torch=model,
        jax=fn,
        jax_params=tree,
        inputs=x,
        overrides=overrides,
        torch_call=lambda module, inputs: module(inputs["x"]),
    )


@pytest.mark.parametrize("reference", [None, "torch"])
def test_a_port_whose_float32_activations_are_off_fails(reference):
    kwargs = {"reference": reference} if reference else {}
    assert crosscheck.run(workload=_port(1.0), dtype="float32", **kwargs).passed
    report = crosscheck.run(workload=_port(1.03), dtype="float32", **kwargs)
    _failed_with(report, "jax", "below float32 precision")


def _steps_jax(*, off32, off64, steps=True):
    """A side whose float64 loss keeps a float32 step (``h`` cast to float32 and back, as Hugging Face's
    RMSNorm upcasts) and whose gradient of ``w1`` is ``off32`` (float32 run) and ``off64`` (float64 run)
    relative off: each run within float32's rounding, opposite ways (a deep Llama's JAX side)."""

    def loss(p, i):
        import jax
        import jax.numpy as jnp

        single = p["w1"].dtype == jnp.float32
        off = off32 if single else off64

        @jax.custom_vjp
        def scaled(w):
            return w

        scaled.defvjp(lambda w: (w, None), lambda _, g: (g * (1 + off),))
        h = jnp.tanh(i["x"] @ scaled(p["w1"]) + p["b1"])
        if steps and not single:
            h = h.astype(jnp.float32).astype(h.dtype)
        return jnp.sum((h @ p["w2"]) ** 2)

    return loss


U32 = 2.0**-24


@pytest.mark.parametrize("reference", [None, "torch"])
def test_a_float64_run_with_float32_steps_is_permitted_its_own_rounding(reference):
    # |g32 - g64| is two float32 roundings when the float64 run keeps float32 steps: each is permitted
    # float32's bound, not their difference one bound (a 9-layer Llama's JAX side: 1.04 of one bound).
    # Each run here is ~0.8 of a bound off, opposite ways: 1.4 of one bound apart, 0.7 of two.
    kwargs = {"reference": reference} if reference else {}
    off32, off64 = -1000 * U32, 1400 * U32
    steps = _workload("steps", _steps_jax(off32=off32, off64=off64), _torch())
    report = crosscheck.run(workload=steps, dtype="float32", **kwargs)
    assert report.passed, report.problems
    assert "keeps float32 steps (noise probe)" in report.backends["jax"].notes["rounding"]
    assert 0.6 < report.backends["jax"].notes["rounding_of_permitted"] < 0.8
    # the same measured difference from a float64 run without float32 steps is beyond float32
    clean = _workload("clean", _steps_jax(off32=off32, off64=off64, steps=False), _torch())
    _failed_with(crosscheck.run(workload=clean, dtype="float32", **kwargs), "jax", "below float32 precision")
    # and a float32 run far below float32 (bfloat16's 2**-9) still fails with float32 steps
    far = _workload("far", _steps_jax(off32=2.0**-9, off64=0.0), _torch())
    _failed_with(crosscheck.run(workload=far, dtype="float32", **kwargs), "jax", "below float32 precision")


def _layer_norm_port(*, fast: bool):
    """PyTorch's ``LayerNorm`` against Flax's: Flax's default variance is ``E[x^2] - E[x]^2``
    (``use_fast_variance=True``), PyTorch's the mean of the squared deviations; the inputs have a mean
    of 30 over a spread of 1, as a residual stream with a large mean (CLIP's text tower) has."""
    import flax.linen as nn
    import torch

    rng = np.random.default_rng(0)
    x = (30.0 + rng.standard_normal((8, 16))).astype(np.float32)
    torch.manual_seed(0)
    norm = torch.nn.LayerNorm(16).eval()
    with torch.no_grad():  # away from (1, 0), as a trained model's
        norm.weight.copy_(1 + 0.5 * torch.randn(16))
        norm.bias.copy_(0.5 * torch.randn(16))
    return crosscheck.Port(
        name=f"layer-norm-{'fast' if fast else 'two-pass'}",
        torch=norm,
        jax=nn.LayerNorm(epsilon=1e-5, use_fast_variance=fast),
        inputs={"x": x},
        torch_call=lambda module, inputs: module(inputs["x"]),
    )


def test_flax_s_fast_variance_of_inputs_with_a_mean_is_below_float32_precision():
    """Flax's default LayerNorm of inputs with a large mean loses the bits its mean squared holds: a
    finding (its gradient is measured beyond what float32 permits), not noise; the two-pass variance
    of the same inputs passes (``docs/measurements/tolerances.md``)."""
    pytest.importorskip("flax")
    assert crosscheck.run(workload=_layer_norm_port(fast=False), dtype="float32", reference="torch").passed
    report = crosscheck.run(workload=_layer_norm_port(fast=True), dtype="float32", reference="torch")
    _failed_with(report, "jax", "below float32 precision", "use_fast_variance=True")
    weight = next(c for c in report.comparisons if c.backend == "jax" and c.parameter == "weight")
    assert "computes `weight` below float32 precision" in weight.message, weight.message
