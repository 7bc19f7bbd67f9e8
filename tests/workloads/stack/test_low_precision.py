"""The stack in bfloat16 and float16: arrays rounded to the dtype, each framework computing in it
(products summed in float32, each result stored in 16 bits), the oracle in float64 on the rounded
arrays, tolerances from the stack's rounding model with the dtype's unit roundoff for storing and
float32's for summing; float16's overflow named; a pass says what 16 bits cannot see."""

from __future__ import annotations

import numpy as np
import planted
import pytest

import crosscheck
from crosscheck._cli.main import main
from crosscheck._compare.dtypes import finfo, numpy_dtype, roundoffs
from crosscheck._workloads.stack import rounding
from crosscheck._workloads.stack.case import Case, make_inputs
from crosscheck._workloads.stack.forward import backward, forward
from crosscheck._workloads.stack.underflow import overflow, underflow
from examples import planted_bugs

LOW = ("bfloat16", "float16")
SMALL = {"layers": 4, "batch": 4, "dim": 8}


def test_unit_roundoffs_of_storing_and_summing():
    assert roundoffs("bfloat16") == (2.0**-24, 2.0**-8)
    assert roundoffs("float16") == (2.0**-24, 2.0**-11)
    assert roundoffs("float32") == (2.0**-24, 0.0) and roundoffs("float64") == (2.0**-53, 0.0)
    assert float(finfo("float16").max) == 65504.0 and float(finfo("bfloat16").tiny) == 2.0**-126


@pytest.mark.parametrize("dtype", LOW)
def test_a_16_bit_case_is_its_dtype_rounded_once(dtype):
    weights, x = make_inputs(Case(dtype=dtype, seed=3))
    wide, _ = make_inputs(Case(dtype="float64", seed=3))
    assert weights.dtype == numpy_dtype(dtype) and x.dtype == numpy_dtype(dtype)
    np.testing.assert_array_equal(weights, wide.astype(numpy_dtype(dtype)))


def _model(dtype, **case):
    weights, x = make_inputs(Case(dtype=dtype, **case))
    fwd = forward(weights, x)
    deltas, grads = backward(fwd)
    return fwd, deltas, grads, rounding.rounding_model(fwd, deltas, dtype)


def test_one_layer_is_judged_by_what_storing_does():
    # One layer of exact inputs: the gradient y0.T @ (2 * relu(z0)) is summed in float32 and stored in
    # bfloat16 (spread s * |g| / sqrt(3)), and carries z0's storing (spread s * |z0| / sqrt(3)) through
    # the factor 2 * y0; the sums' float32 rounding is 2**16 times smaller.
    fwd, _, grads, model = _model("bfloat16", layers=1)
    s2 = 2.0**-16 / 3.0
    stored = s2 * np.square(grads[0])
    carried = 4.0 * s2 * np.square(fwd.ys[0]).T @ np.square(fwd.zs[0] * fwd.masks[0])
    # A Monte Carlo estimate (64 samples): ~9 % spread where one row dominates an entry, none typically.
    ratio = model.grad_sigma[0] / np.sqrt(stored + carried)
    assert np.all(np.abs(ratio - 1) < 0.4) and abs(np.median(ratio) - 1) < 0.05


def test_storing_keeps_a_sign_so_it_flips_no_relu():
    # A pre-activation's own storing cannot flip its ReLU: the sign's spread leaves it out (the first
    # layer's, of exact inputs, is float32's alone), the value's bound keeps it.
    fwd, deltas, _, model = _model("bfloat16")
    single = rounding.rounding_model(fwd, deltas, "float32")  # the same point's float32 sums
    assert model.z_stored is not None
    np.testing.assert_allclose(model.z_sigma[0], single.z_sigma[0], rtol=1e-12)
    stored = 2.0**-8 * np.abs(fwd.zs[0]) / np.sqrt(3.0)
    np.testing.assert_allclose(model.value_bound(0), 8 * np.hypot(single.z_sigma[0], stored), rtol=1e-12)


def test_float32_models_no_storing():
    _, _, _, model = _model("float32")
    assert model.z_stored is None
    np.testing.assert_array_equal(model.value_bound(2), model.z_bound(2))


@pytest.mark.parametrize("dtype", LOW)
def test_healthy_frameworks_pass_over_20_seeds(dtype):
    for seed in range(20):
        report = crosscheck.run(**SMALL, dtype=dtype, seed=seed, backends=["jax", "torch"])
        assert report.passed, (seed, report.problems)
        mismatched = {c["backend"]: c["mismatched"] for c in report.to_dict()["comparisons"]}
        assert mismatched == {"jax": 0, "torch": 0}


@pytest.mark.parametrize("dtype", LOW)
@pytest.mark.parametrize("init", ["identity", "integer"])
def test_exact_and_integer_cases_pass(dtype, init):
    report = crosscheck.run(**SMALL, dtype=dtype, init=init, backends=["jax", "torch", planted.correct])
    assert report.passed, report.problems


BUGS = [planted.transposed, planted.mean_not_sum, planted.no_last_relu, planted_bugs.BackwardBugAtLayer5()]


@pytest.mark.parametrize("bug", BUGS, ids=["transposed", "mean_not_sum", "no_last_relu", "backward_bug"])
def test_planted_bugs_are_caught_in_bfloat16(bug):
    # The planted gradients compute in the inputs' dtype (NumPy sums bfloat16 products in float32).
    report = crosscheck.run(dim=8, dtype="bfloat16", seed=1, backends=[planted.correct, bug])
    (good, bad) = report.to_dict()["comparisons"]
    assert good["passed"] and not bad["passed"] and bad["mismatched"] > 0


def test_a_16_bit_pass_says_what_it_cannot_see():
    report = crosscheck.run(**SMALL, dtype="bfloat16", backends=["torch"])
    assert report.passed
    text = report.verdicts()["torch"]
    assert text.startswith("agrees in bfloat16, within its rounding: a median ")
    assert text.endswith("check in float32 too (--dtype float32)")
    assert crosscheck.run(**SMALL, dtype="float32", backends=["torch"]).verdicts() == {}


def test_a_bug_below_bfloat16s_noise_passes_there_and_fails_in_float32():
    def scaled(weights, x):  # a gradient 1 % too large: under bfloat16's rounding, far over float32's
        grad = planted.correct(weights, x)
        return (grad.astype(np.float64) * 1.01).astype(grad.dtype)

    low = crosscheck.run(**SMALL, dtype="bfloat16", backends=[scaled])
    assert low.passed and "check in float32 too" in low.verdicts()["scaled"]
    assert not crosscheck.run(**SMALL, dtype="float32", backends=[scaled]).passed


def test_float16_overflow_is_named_as_overflow():
    report = crosscheck.run(layers=12, dim=16, batch=8, dtype="float16", init="integer", backends=["torch"])
    assert not report.passed
    (comparison,) = report.to_dict()["comparisons"]
    assert "non-finite gradient" in comparison["message"]
    assert "float16 overflows on this case: the pre-activation z[" in comparison["message"]
    assert "above float16's largest 65504" in comparison["message"]


def test_overflow_is_silent_where_values_fit():
    weights, x = make_inputs(Case(dtype="float16"))
    fwd = forward(weights, x)
    assert overflow(fwd, backward(fwd)[0], "float16") == ""


def test_float16_underflow_is_bounded_where_a_stored_result_is_subnormal():
    # A weight scale that puts the last layers' values below float16's smallest normal (6.1e-5):
    # the underflow term covers them; in a case of ordinary magnitudes it is at most a rare entry's.
    weights, x = make_inputs(Case(dtype="float64", layers=3, dim=8, batch=4))
    small = (weights * 0.01).astype(np.float16)
    fwd = forward(small, x.astype(np.float16))
    assert underflow(fwd, backward(fwd)[0], "float16").grad.any()
    fwd, deltas, _, model = _model("float16")
    assert underflow(fwd, deltas, "float16").grad.max() < 1e-2 * model.grad_bound.max()


def test_a_float32_case_refuses_a_candidate_that_declares_16_bits():
    class Coarse:
        output_dtype = "bfloat16"

        def grad(self, weights, x):
            return planted.correct(weights, x).astype(numpy_dtype("bfloat16"))

    report = crosscheck.run(**SMALL, backends=[Coarse()])
    assert not report.passed
    assert "crosscheck judges float32 and float64 only" in report.problems[0] or any(
        "judges float32 and float64 only" in str(r.error) for r in report.backends.values()
    )


@pytest.mark.parametrize("dtype", LOW)
def test_the_cli_runs_16_bits(capsys, dtype):
    status = main(["run", "--layers", "3", "--batch", "3", "--dim", "4", "--dtype", dtype])
    out = " ".join(capsys.readouterr().out.split())
    assert status == 0, out
    assert f"agrees in {dtype}" in out and "check in float32 too" in out


def test_a_workload_runs_in_16_bits(capsys):
    # Workloads and ports in 16 bits: tests/workloads/model/test_low_precision.py.
    status = main(["run", "--workload", "ste-stack", "--dtype", "bfloat16", "--no-isolate"])
    out = " ".join(capsys.readouterr().out.split())
    assert status == 0 and "verdict of `jax`: agrees in bfloat16" in out, out


def test_a_bfloat16_bundle_replays_bit_for_bit(tmp_path, capsys):
    # .npy has no bfloat16: the bundle stores its bits and names the dtype; replay gets bfloat16 back.
    path = str(tmp_path / "low.npz")
    options = ["--layers", "3", "--batch", "3", "--dim", "4", "--dtype", "bfloat16"]
    status = main(["run", *options, "--backend", "planted:no_last_relu", "--save-bundle", path])
    assert status == 1
    capsys.readouterr()
    assert main(["replay", path, "--trust"]) == 0, capsys.readouterr().out


def test_the_hvp_refuses_16_bits_in_one_line(capsys):
    assert main(["run", "--dtype", "float16", "--quantity", "hvp", "--layers", "2", "--dim", "3"]) == 2
    assert "quantity 'hvp' is judged in float32 and float64; found dtype 'float16'" in capsys.readouterr().err


def test_a_last_layer_flip_in_a_live_row_is_bounded_in_16_bits():
    # Seed 4 at d = 8: z[7][7, 7] = -1.7e-4 is within bfloat16's reach of zero; PyTorch computes it
    # positive, so its gradient column 7 of the last layer gets 2 * y * z where float64 has exact zeros
    # (and no modelled rounding). That forward part is bounded (the `kinks` term, or unjudgeable).
    report = crosscheck.run(dim=8, dtype="bfloat16", seed=4, backends=["torch"])
    assert report.passed, report.problems
    report = crosscheck.run(dim=8, dtype="float32", seed=4, backends=["torch"])
    assert report.passed and report.to_dict()["comparisons"][0]["unjudgeable"] == 0
