"""The straight-through-estimator stack: AD backends against the surrogate oracle; the naive check."""

from __future__ import annotations

import json

import numpy as np
import pytest

import crosscheck
from crosscheck._cli.main import main
from crosscheck._evidence import ste as _ste_tool
from crosscheck._workloads import ste_stack as _ste
from crosscheck._workloads.model.declare import Workload
from crosscheck._workloads.registry import available_workloads, load_workload

SMALL = {"layers": 3, "batch": 4, "dim": 4}


def _plain_stack_gradient(params, inputs):
    """A planted bug: the STE forgot the rounding in the forward pass (the plain stack's gradient)."""
    from crosscheck._workloads.stack.forward import backward, forward

    weights = params["weights"]
    fwd = forward(weights, inputs["x"])
    return {"weights": np.stack(backward(fwd)[1]).astype(weights.dtype)}


def _round_without_ste(params, inputs):
    """A planted bug: plain rounding, whose derivative is zero wherever it exists."""
    return {"weights": np.zeros_like(params["weights"])}


def test_ste_stack_is_a_registered_workload_with_a_surrogate():
    assert "ste-stack" in available_workloads()
    workload = load_workload("ste-stack").workload
    assert isinstance(workload, Workload) and workload.surrogate is not None
    assert set(workload.implementations) == {"jax", "torch"}
    params, inputs = workload.make(seed=1, dtype="float64")
    again, _ = workload.make(seed=1, dtype="float64")
    np.testing.assert_array_equal(params["weights"], again["weights"])
    # The surrogate has the value of the rounded loss at the base point, and not beyond it.
    surrogate = workload.surrogate(params, inputs)
    assert surrogate(params) == pytest.approx(workload.reference(params, inputs), rel=1e-12)
    moved = {"weights": params["weights"] * 1.01}
    assert surrogate(moved) != pytest.approx(workload.reference(moved, inputs), rel=1e-6)


def test_implementations_compute_the_rounded_value():
    jax = pytest.importorskip("jax")
    torch = pytest.importorskip("torch")
    workload = _ste.ste_stack(**SMALL)
    params, inputs = workload.make(seed=2, dtype="float64")
    want = workload.reference(params, inputs)
    with jax.enable_x64(True):
        got_jax = float(_ste.jax_loss({"weights": params["weights"]}, {"x": inputs["x"]}))
    got_torch = float(
        _ste.torch_loss({"weights": torch.tensor(params["weights"])}, {"x": torch.tensor(inputs["x"])})
    )
    assert got_jax == pytest.approx(want, rel=1e-12) and got_torch == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("seed", [0, 3])
def test_ad_backends_agree_with_the_surrogate_oracle(dtype, seed):
    pytest.importorskip("jax")
    pytest.importorskip("torch")
    ste = _ste_tool.check_ste(seed=seed, dtype=dtype, **SMALL)
    report = ste.report
    assert report.passed, report.problems
    assert [c.backend for c in report.comparisons] == ["jax", "torch"]
    assert all(c.judged > 0.8 * c.total for c in report.comparisons)
    assert report.case["oracle_differentiates"].startswith("surrogate")
    assert ste.naive["rounded_activations"] > 0  # the rounding really moved activations


def test_generic_workload_run_checks_the_surrogate():
    pytest.importorskip("jax")
    report = crosscheck.run(workload="ste-stack", seed=1, backends=["jax"])
    assert report.passed and report.case["oracle_differentiates"].startswith("surrogate")


def test_naive_finite_difference_gives_zeros_and_says_why():
    pytest.importorskip("jax")
    ste = _ste_tool.check_ste(seed=0, backends=("jax",), **SMALL)
    naive = ste.naive
    assert naive["max_abs"] == 0.0 and naive["zero_entries"] == naive["total"] == 48
    assert naive["max_abs_diff_from_reference"] > 1.0  # the surrogate's gradient is far from zero
    assert "piecewise constant" in naive["why"]
    record = ste.to_dict()
    assert record["naive_finite_difference"] == naive and "straight_through" in record
    assert record["passed"] is True


@pytest.mark.parametrize("bug", [_plain_stack_gradient, _round_without_ste], ids=["no_rounding", "no_ste"])
def test_planted_wrong_ste_gradient_is_caught(bug):
    ste = _ste_tool.check_ste(seed=0, backends=(bug,), **SMALL)
    (comparison,) = ste.report.comparisons
    assert not ste.passed and comparison.mismatched > 0


def test_cli_ste(tmp_path, capsys):
    out = tmp_path / "ste.json"
    command = ["ste", "--layers", "2", "--dim", "4", "--batch", "4"]
    assert main([*command, "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "naive finite difference of the rounded loss" in printed and "PASSED" in printed
    assert "the oracle differentiates the workload's surrogate" in printed
    data = json.loads(out.read_text())
    assert data["case"]["workload"] == "ste-stack" and data["naive_finite_difference"]["max_abs"] == 0.0
    assert main(["ste", "--dim", "0"]) == 2
    assert "`--dim` must be a positive integer" in capsys.readouterr().err
