"""Hessian-vector products: the adapters against full Hessians, the judge (every entry and screened), the
driver and the CLI (the oracle's own tests: ``tests/workloads/stack/oracle/test_hvp.py``)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from planted_hvp import BUGS, CORRECT, FLOAT32_ONLY

import crosscheck
from crosscheck import Case, make_inputs
from crosscheck._cli.main import main
from crosscheck._workloads.stack.oracle.hvp import direction, kink_radius

SMALL = {"layers": 3, "batch": 4, "dim": 3}


def _inputs(dtype="float64", seed=2, **shape):
    return make_inputs(Case(**{**SMALL, **shape}, dtype=dtype, seed=seed))


def _full_hessian(name, weights, x):
    """The full (P, P) Hessian, P = L d d, by the framework's own Hessian transform."""
    if name == "jax":
        jax = pytest.importorskip("jax")
        from crosscheck.backends.jax.stack import _loss

        with jax.enable_x64(True):
            h = jax.jacfwd(jax.jacrev(_loss))(jax.numpy.asarray(weights), jax.numpy.asarray(x))
            return np.asarray(h).reshape(weights.size, weights.size)
    torch = pytest.importorskip("torch")

    def loss(w):
        y = torch.tensor(x)
        for k in range(w.shape[0]):
            y = torch.relu(y @ w[k])
        return torch.sum(y**2)

    return torch.autograd.functional.hessian(loss, torch.tensor(weights)).numpy().reshape(weights.size, -1)


def test_hvp_equals_full_hessian_times_v(autodiff_backend):
    weights, x = _inputs()
    v = direction(weights, 1)
    hvp = autodiff_backend.hvp(weights, x, v)
    full = _full_hessian(autodiff_backend.name, weights, x)
    assert hvp.shape == weights.shape and hvp.dtype == np.float64
    np.testing.assert_allclose(hvp.ravel(), full @ v.ravel(), rtol=1e-12, atol=1e-12 * np.abs(hvp).max())
    # ReLU's second derivative is 0, yet the Hessian is not: the loss is a product over layers, squared.
    assert np.abs(full).max() > 0.1 and np.abs(hvp).max() > 0.1


@pytest.mark.parametrize("name", ["jax", "torch", "numpy-fd"])
def test_hvp_along_the_weights_is_2l_minus_1_times_the_gradient(name):
    # The loss is homogeneous of degree 2L in the weights, so (Euler) H W = (2L - 1) grad: an exact,
    # non-trivial known answer for every backend, oracle included.
    backend = crosscheck.load_backend(name)
    weights, x = _inputs(layers=4, dim=4)
    grad = crosscheck.load_backend("jax").grad(weights, x) if name != "torch" else backend.grad(weights, x)
    hvp = backend.hvp(weights, x, weights.copy())
    assert np.abs(grad).max() > 0.1
    np.testing.assert_allclose(hvp, 7 * grad, rtol=1e-7, atol=1e-9 * np.abs(grad).max())


def test_float32_hvp_is_close_to_float64(autodiff_backend):
    weights, x = _inputs(layers=4, dim=4)
    v = direction(weights, 1)
    hvp64 = autodiff_backend.hvp(weights, x, v)
    hvp32 = autodiff_backend.hvp(weights.astype(np.float32), x.astype(np.float32), v.astype(np.float32))
    assert hvp32.dtype == np.float32
    np.testing.assert_allclose(hvp32, hvp64, rtol=1e-4, atol=1e-5 * np.abs(hvp64).max())


def test_exact_zero_pre_activations_make_every_entry_unjudgeable():
    weights, x = make_inputs(Case(**SMALL, dtype="float64", seed=0, init="integer"))
    assert kink_radius(weights, x, direction(weights, 0))[0] == 0.0
    report = crosscheck.run(quantity="hvp", weights=weights, x=x, backends=["jax"])
    (comparison,) = report.comparisons
    assert comparison.status == "unjudgeable" and not report.passed
    assert "kink within reach along v" in next(iter(comparison.unjudgeable_reasons))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("seed", [0, 1])
def test_healthy_backends_pass(dtype, seed):
    report = crosscheck.run(
        quantity="hvp", layers=4, batch=4, dim=5, dtype=dtype, seed=seed, backends=["jax", "torch", CORRECT]
    )
    assert report.passed, report.problems
    assert all(c.worst_ratio < 1 and c.judged == 100 for c in report.comparisons)


@pytest.mark.parametrize("bug", BUGS, ids=[b.name for b in BUGS])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_planted_wrong_hvp_is_caught(bug, dtype):
    report = crosscheck.run(quantity="hvp", layers=4, batch=4, dim=5, dtype=dtype, seed=3, backends=[bug])
    (comparison,) = report.comparisons
    assert not report.passed and comparison.mismatched > 0 and comparison.worst_ratio > 100


@pytest.mark.parametrize("oracle_mode", ["full", "screen"])
def test_an_hvp_wrong_in_float32_only_is_not_its_own_tolerance(oracle_mode):
    # Its float32 and float64 answers differ by 1 %: the re-run term is capped at what float32 permits.
    report = crosscheck.run(
        quantity="hvp", layers=4, batch=4, dim=5, seed=3, backends=[FLOAT32_ONLY], oracle_mode=oracle_mode
    )
    (comparison,) = report.comparisons
    assert not report.passed and comparison.mismatched > 0
    assert "capped at what float32 permits" in comparison.tolerance_sources["rerun"]
    healthy = crosscheck.run(quantity="hvp", layers=4, batch=4, dim=5, seed=3, backends=[CORRECT])
    assert "capped" not in healthy.comparisons[0].tolerance_sources["rerun"]


def test_direction_is_deterministic_and_recorded():
    weights, _ = _inputs(dtype="float32")
    np.testing.assert_array_equal(direction(weights, 5), direction(weights, 5))
    assert not np.array_equal(direction(weights, 5), direction(weights, 6))
    assert direction(weights, 5).dtype == np.float32
    report = crosscheck.run(quantity="hvp", **SMALL, seed=5, backends=["jax"])
    record = report.to_dict()
    assert record["quantity"] == "hvp"
    assert record["hvp_direction"]["generator"].startswith("numpy.random.default_rng([5, ")
    assert record["hvp_direction"]["oracle"]["nodes"] == 6 * 4  # 2L nodes for each of the N rows
    assert "rerun" in record["comparisons"][0]["tolerance_sources"]
    assert crosscheck.run(**SMALL, backends=["jax"]).to_dict()["quantity"] == "grad"


def test_a_backend_without_hvp_fails_when_asked_for():
    def grad_only(weights, x):
        return np.zeros_like(weights)

    report = crosscheck.run(quantity="hvp", **SMALL, backends=[grad_only])
    assert not report.passed
    assert (
        report.backends["grad_only"].error
        == "has no `hvp(weights, x, v)` method, so it cannot be checked with quantity 'hvp'"
    )


def test_bad_quantity_is_a_one_line_error():
    expected = "`quantity` must be one of grad, hvp, update, output; found 'hessian'"
    with pytest.raises(ValueError, match=expected):
        crosscheck.run(quantity="hessian")


def test_cli_quantity_hvp(tmp_path, capsys):
    out = tmp_path / "report.json"
    command = ["run", "--quantity", "hvp", "--layers", "3", "--dim", "4"]
    assert main([*command, "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "quantity=hvp" in printed and "PASSED" in printed
    assert json.loads(out.read_text())["quantity"] == "hvp"
    assert main([*command, "--explain"]) == 2
    assert capsys.readouterr().err.count("\n") == 1


# -- screening ------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_screened_healthy_backends_pass(dtype):
    report = crosscheck.run(
        quantity="hvp", layers=4, batch=4, dim=5, dtype=dtype, seed=1, oracle_mode="screen",
        backends=["jax", "torch", CORRECT],
    )  # fmt: skip
    assert report.passed, report.problems
    for comparison in report.comparisons:
        assert comparison.coverage.startswith("screened: 4 layers x 4 random directions")
        assert not [row for row in comparison.screening if row["full_check"]]
        assert max(row["worst_ratio"] for row in comparison.screening) < 1


@pytest.mark.parametrize("bug", BUGS, ids=[b.name for b in BUGS])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_screening_catches_every_planted_hvp_bug(bug, dtype):
    report = crosscheck.run(
        quantity="hvp", layers=4, batch=4, dim=5, dtype=dtype, seed=3, oracle_mode="screen", backends=[bug]
    )
    (comparison,) = report.comparisons
    assert not report.passed and comparison.mismatched > 0 and comparison.worst_ratio > 100
    checked = [row["layer"] for row in comparison.screening if row["full_check"]]
    assert checked and "layers checked entry by entry" in comparison.message
    # Only the layers a direction failed were checked entry by entry; the others were not judged.
    assert comparison.judged == len(checked) * 25


def test_auto_mode_screens_the_hvp_only_when_the_full_oracle_is_costly(monkeypatch):
    from crosscheck._workloads.stack.judge import cost

    full = crosscheck.run(quantity="hvp", **SMALL, backends=["jax"])
    assert full.comparisons[0].coverage == "every entry"
    monkeypatch.setattr(cost, "SCREEN_FLOPS", 1.0)
    screened = crosscheck.run(quantity="hvp", **SMALL, backends=["jax"], directions=2)
    assert screened.comparisons[0].coverage.startswith("screened: 3 layers x 2 random directions")
    oracle = screened.to_dict()["hvp_direction"]["oracle"]
    assert oracle["mode"] == "screen" and oracle["directions"] == 2
    assert oracle["directions_generator"].startswith("numpy.random.default_rng(0).integers(0, 2")


def test_cli_screens_the_hvp_with_directions(capsys):
    command = ["run", "--quantity", "hvp", "--layers", "3", "--dim", "4", "--oracle-mode", "screen"]
    assert main([*command, "--directions", "3"]) == 0
    printed = capsys.readouterr().out
    assert "screened: 3 layers x 3 random directions" in printed and "PASSED" in printed
    # The PASSED line says what was not judged entry by entry (no layer was: every direction agreed).
    said = (
        "(screened: 0 of 48 entries judged one by one, the others only along 3 random directions per layer)"
    )
    assert said in " ".join(printed.split())  # the terminal's width wraps the line
    assert main([*command, "--directions", "3", "--backend", "jax", "--quiet"]) == 0
    assert capsys.readouterr().out == f"PASSED {said}\n"


def test_the_hvp_has_no_outputs_mode(capsys):
    command = ["run", "--quantity", "hvp", "--layers", "3", "--dim", "4", "--oracle-mode", "outputs"]
    assert main(command) == 2
    err = capsys.readouterr().err
    assert "`oracle_mode` 'outputs' judges the gradient; quantity 'hvp' takes full or screen" in err
