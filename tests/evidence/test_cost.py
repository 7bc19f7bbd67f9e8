"""crosscheck cost: analytic counts against torch's FlopCounterMode and XLA, ratios, the CLI."""

from __future__ import annotations

import json

import pytest

from crosscheck._cli.main import main
from crosscheck._evidence import cost as _cost

SIZE = {"layers": 2, "batch": 4, "dim": 3}  # P = 18: the Hessian is quick to build


@pytest.fixture(scope="module")
def table():
    pytest.importorskip("jax")
    pytest.importorskip("torch")
    return _cost.cost_table(SIZE["layers"], SIZE["batch"], SIZE["dim"])


def test_analytic_matches_torch_flop_counter_exactly(table):
    # Matmul flops are deterministic, and FlopCounterMode counts only matmul-like ops: the torch
    # adapter's checkpointed programs are exactly the analytic count with the forward recomputed.
    torch_counts, analytic = table["counts"]["torch"], table["counts"]["analytic, checkpointed"]
    assert torch_counts == analytic
    m, n_layers, p = 2 * 4 * 3 * 3, 2, 18
    assert analytic["forward"] == n_layers * m
    assert table["counts"]["analytic"]["gradient"] == (3 * n_layers - 1) * m
    assert table["counts"]["analytic"]["hvp"] == (9 * n_layers - 5) * m
    assert table["counts"]["analytic"]["hessian"] == (3 * n_layers - 1 + p * (6 * n_layers - 4)) * m


def test_xla_counts_matmuls_plus_elementwise(table):
    jax_counts, analytic = table["counts"]["jax"], table["counts"]["analytic"]
    n_layers, batch, dim = SIZE["layers"], SIZE["batch"], SIZE["dim"]
    # ReLU on every pre-activation, the square and the sum of the output.
    assert jax_counts["forward"] == analytic["forward"] + n_layers * batch * dim + 2 * batch * dim - 1
    for quantity in ("gradient", "hvp", "hessian"):
        assert jax_counts[quantity] >= analytic[quantity]


def test_rolled_scan_counts_its_body_once():
    pytest.importorskip("jax")
    short = _cost.jax_counts(2, 4, 3, unroll=False, hessian_limit=0)
    long = _cost.jax_counts(6, 4, 3, unroll=False, hessian_limit=0)
    assert long["forward"] == short["forward"]  # three times the layers, the same count


def test_ratios_are_in_their_expected_ranges(table):
    ratios = table["ratios"]
    for source in ("analytic", "jax", "torch"):
        assert 2.0 <= ratios["gradient/forward"][source] <= 4.0
        assert 2.0 <= ratios["hvp/gradient"][source] <= 3.5
        assert 0.4 * 18 <= ratios["hessian/hvp"][source] <= 1.2 * 18
    assert ratios["gradient/forward"]["torch"] == pytest.approx(3.0 + 1.0 - 1.0 / 2)  # (4L - 1) / L


def test_hessian_is_skipped_above_the_limit():
    counts = _cost.analytic(8, 8, 16)  # P = 2048
    assert counts["hessian"] is None and counts["hvp"] == (9 * 8 - 5) * 2 * 8 * 16 * 16


def test_cli_cost_prints_the_table_and_writes_json(tmp_path, capsys):
    out = tmp_path / "cost.json"
    command = ["cost", "--layers", "2", "--dim", "3", "--batch", "2"]
    assert main([*command, "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    for text in ("forward", "gradient", "hvp", "hessian", "hvp/gradient", "Where the counts differ"):
        assert text in printed
    data = json.loads(out.read_text())
    assert data["counts"]["torch"]["forward"] == 2 * 2 * 2 * 3 * 3
    assert main(["cost", "--dim", "0"]) == 2
    assert "`--dim` must be a positive integer, found 0" in capsys.readouterr().err
