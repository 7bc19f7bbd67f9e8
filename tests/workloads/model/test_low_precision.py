"""Workloads and ports in bfloat16 and float16: parameters and inputs rounded once to the dtype, each
side computing in it, its rounding measured by its own float32 re-run and capped by what the dtype
permits (``terms.LOW_PERMIT_ULPS``), the oracle in float64; a pass says what 16 bits cannot see, a
float16 overflow is named as one."""

from __future__ import annotations

import numpy as np
import pytest
from tanh_mlp import SHAPES, jax_loss, numpy_loss

import crosscheck
from crosscheck._cli.main import main
from crosscheck._compare import terms
from crosscheck._compare.dtypes import numpy_dtype, unit_roundoff

pytest.importorskip("jax")
pytest.importorskip("torch")

LOW = ("bfloat16", "float16")


def _torch(*, scale=1.0, low_scale=1.0, sign=1.0, loss_scale=1.0):
    """PyTorch's side: healthy, or with its gradient scaled (``scale``), its activations scaled in a
    16-bit run only (``low_scale``), ``b1`` with the wrong sign, or its loss scaled."""

    def loss(p, i):
        import torch

        class Grad(torch.autograd.Function):  # identity forward; the gradient scaled on the way back
            @staticmethod
            def forward(ctx, x):
                return x.view_as(x)

            @staticmethod
            def backward(ctx, g):
                return g * scale

        h = torch.tanh(i["x"] @ Grad.apply(p["w1"]) + sign * p["b1"])
        if h.dtype in (torch.bfloat16, torch.float16):
            h = h * low_scale
        return loss_scale * torch.sum((h @ p["w2"]) ** 2)

    return loss


def _workload(name, torch_loss, reference=numpy_loss, jax_loss=jax_loss):
    return crosscheck.Workload(
        name=name,
        parameters=SHAPES,
        inputs={"x": (16, 4)},
        reference=reference,
        implementations={"jax": jax_loss, "torch": torch_loss},
    )


HEALTHY = _workload("healthy", _torch())


def _text(report, backend):
    verdict = report.backends[backend].verdict
    return "\n".join(
        [report.backends[backend].error or "", verdict.text if verdict else ""]
        + [c.message for c in report.comparisons if c.backend == backend]
    )


@pytest.mark.parametrize("dtype", LOW)
@pytest.mark.parametrize("reference", [None, "torch"])
def test_a_healthy_workload_passes_in_16_bits_and_says_what_it_cannot_see(dtype, reference):
    kwargs = {"reference": reference} if reference else {}
    report = crosscheck.run(workload=HEALTHY, dtype=dtype, **kwargs)
    assert report.passed, report.problems
    for name in ("jax",) if reference else ("jax", "torch"):
        result = report.backends[name]
        assert result.dtype == dtype and result.notes["rounding"].startswith("measured: re-run in float32")
        assert 0 < result.notes["rounding_of_permitted"] < 1
        assert f"agrees in {dtype}" in result.verdict.text and "check in float32 too" in result.verdict.text


def test_a_16_bit_case_is_made_in_float32_and_rounded_once():
    seen = []

    def generate(rng, dtype):
        seen.append(dtype)
        return {k: rng.standard_normal(s) for k, s in SHAPES.items()}, {"x": rng.standard_normal((16, 4))}

    workload = crosscheck.Workload(
        name="made",
        parameters=SHAPES,
        inputs={"x": (16, 4)},
        generate=generate,
        implementations={"jax": jax_loss},
    )
    params, inputs = workload.make(seed=3, dtype="bfloat16")
    wide, _ = workload.make(seed=3, dtype="float32")
    assert seen == ["float32", "float32"]
    assert params["w1"].dtype == numpy_dtype("bfloat16") and inputs["x"].dtype == numpy_dtype("bfloat16")
    assert np.array_equal(params["w1"], wide["w1"].astype(numpy_dtype("bfloat16")))


def test_a_bug_below_bfloat16s_noise_passes_there_and_fails_in_float32():
    small = _workload("x1.01", _torch(scale=1.01))
    report = crosscheck.run(workload=small, dtype="bfloat16", reference="torch", backends=["jax"])
    # jax against a wrong torch: the reference is wrong by 1 %, below bfloat16's measured rounding.
    assert report.passed, report.problems
    assert "check in float32 too" in report.backends["jax"].verdict.text
    assert not crosscheck.run(workload=small, dtype="float32").passed


@pytest.mark.parametrize("dtype", LOW)
def test_a_bug_above_the_noise_fails_in_16_bits(dtype):
    report = crosscheck.run(workload=_workload("sign", _torch(sign=-1.0)), dtype=dtype)
    assert not report.passed
    assert report.backends["torch"].verdict is None and report.backends["jax"].verdict is not None


def test_a_side_wrong_in_16_bits_only_cannot_set_its_own_tolerance():
    # x1.5 in its bfloat16 run only: its float32 re-run differs by ~50 %, far beyond what bfloat16
    # rounding permits, so the measured difference is capped, not taken as its tolerance.
    report = crosscheck.run(workload=_workload("low-only", _torch(low_scale=1.5)), dtype="bfloat16")
    assert "computes" in _text(report, "torch") and "below bfloat16 precision" in _text(report, "torch")
    assert not report.passed and report.backends["jax"].verdict is not None


def test_the_cap_is_the_dtypes_own_and_never_float32s():
    assert terms.permit_ulps("float32") == terms.PERMIT_ULPS
    for dtype in LOW:  # a 16-bit cap of 256 u would permit 100 % of an entry in bfloat16
        assert terms.permit_ulps(dtype) * unit_roundoff(dtype) < 0.1
    wide = np.ones(4)
    assert np.allclose(terms.bound(wide, dtype="bfloat16"), 2 * terms.permit_ulps("bfloat16") * 2.0**-8)


@pytest.mark.parametrize("reference", [None, "torch"])
def test_float16_overflow_is_named_as_overflow(reference):
    # A loss of ~1e6: its gradient of `w2` reaches ~1e5, beyond float16's 65504, on both sides.
    big = _workload(
        "big",
        _torch(loss_scale=3e4),
        reference=lambda p, i: 3e4 * numpy_loss(p, i),
        jax_loss=lambda p, i: 3e4 * jax_loss(p, i),
    )
    kwargs = {"reference": reference, "backends": ["jax"]} if reference else {}
    report = crosscheck.run(workload=big, dtype="float16", **kwargs)
    assert not report.passed
    text = _text(report, reference or "torch")
    assert "float16 overflow" in text and "65504" in text, text
    assert crosscheck.run(workload=big, dtype="bfloat16", **kwargs).passed  # bfloat16's range holds it


def test_the_cli_runs_a_port_in_bfloat16_and_locates_a_bug(capsys):
    pytest.importorskip("flax")
    args = ["run", "--reference", "torch", "--dtype", "bfloat16", "--no-isolate", "--quiet"]
    assert main([*args, "--workload", "examples.port.convnet:port"]) == 0, capsys.readouterr().out
    capsys.readouterr()
    assert main([*args, "--workload", "examples.port.convnet:same_padding"]) == 1
    out = " ".join(capsys.readouterr().out.split())
    assert "the forward pass differs first at `conv1`" in out, out


def test_16_bit_sweeps_and_training_steps_are_refused_in_one_line(capsys):
    assert main(["sweep", "--dtype", "bfloat16"]) == 2
    assert "argument --dtype: invalid choice: 'bfloat16'" in capsys.readouterr().err
    pytest.importorskip("optax")
    args = ["--quantity", "update", "--steps", "1", "--dtype", "bfloat16", "--no-isolate"]
    assert main(["run", "--workload", "examples.port.gpt2:train", *args]) == 2
    err = capsys.readouterr().err
    assert "of quantity 'update' must be float32" in err and "Traceback" not in err


def _upcasting(framework):
    """A side that computes in float32 whatever it is given: its parameters and inputs upcast."""
    import importlib

    def loss(p, i):
        if framework == "jax":
            import jax.numpy as jnp

            p, i = ({k: v.astype(jnp.float32) for k, v in d.items()} for d in (p, i))
            return jax_loss(p, i)
        torch = importlib.import_module("torch")
        p, i = ({k: v.to(torch.float32) for k, v in d.items()} for d in (p, i))
        return _torch()(p, i)

    return loss


#: Which side computes in float32 under a 16-bit dtype (an upcast, a module pinned to float32).
WIDE = {"jax": ("jax",), "torch": ("torch",), "both": ("jax", "torch")}


@pytest.mark.parametrize("dtype", LOW)
@pytest.mark.parametrize("wide", list(WIDE), ids=list(WIDE))
def test_a_side_that_computes_in_float32_is_named_and_with_no_16_bit_side_the_check_fails(wide, dtype):
    sides = WIDE[wide]
    workload = _workload(
        f"wide-{wide}",
        _upcasting("torch") if "torch" in sides else _torch(),
        jax_loss=_upcasting("jax") if "jax" in sides else jax_loss,
    )
    report = crosscheck.run(workload=workload, dtype=dtype)
    for name in ("jax", "torch"):
        said = f"`{name}` computes in float32, not {dtype}"
        assert (said in _text(report, name)) == (name in sides), _text(report, name)
    if len(sides) == 2:  # neither side computed in the dtype asked: the check did not happen
        assert not report.passed
        assert any(f"no {dtype} arithmetic was checked" in p for p in report.problems), report.problems
    else:
        assert report.passed, report.problems
