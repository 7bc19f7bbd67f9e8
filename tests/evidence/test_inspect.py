"""`crosscheck inspect`: structure verdicts, residual lists and recomputation counts; planted liars."""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import planted_structure
import pytest

import crosscheck
from crosscheck._cli.main import main
from crosscheck._evidence.inspect import grouped, inspect_backend, stack_inputs, ulp_difference

LAYERS, BATCH, DIM = 4, 2, 3
WEIGHTS, X = crosscheck.make_inputs(crosscheck.Case(layers=LAYERS, batch=BATCH, dim=DIM))
ACTIVATION = BATCH * DIM * 4  # bytes of one float32 (N, d) activation


def _load(name):
    try:
        return crosscheck.load_backend(name)
    except crosscheck.BackendUnavailable as exc:
        pytest.skip(str(exc))


@pytest.mark.parametrize(
    ("name", "boundary"),
    [
        ("jax", "layer"),
        ("jax-plain", None),
        ("jax-remat-scan", "scan"),
        ("jax-segments", "segment"),
        ("torch", "layer"),
        ("torch-plain", None),
        ("torch-segments", "segment"),
    ],
)
def test_built_ins_are_what_they_claim(name, boundary):
    result = inspect_backend(_load(name), WEIGHTS, X)
    assert result.ok, result.problems
    assert result.found["checkpoint"] == boundary
    assert result.claims["checkpoint"] == boundary


@pytest.mark.parametrize("name", ["jax", "jax-plain", "jax-remat-scan"])
def test_jax_weights_are_consumed_by_one_scan_over_the_layers(name):
    found = inspect_backend(_load(name), WEIGHTS, X).found
    assert found["scan_kind"] == "one scan over the layers"
    assert {s["length"] for s in found["weight_scans"]} == {LAYERS}
    assert sum(not s["reverse"] for s in found["weight_scans"]) >= 1
    assert sum(s["reverse"] for s in found["weight_scans"]) == 1  # one backward scan
    assert found["weight_products_outside_scan"] == 0


@pytest.mark.parametrize(
    ("planted", "expected"),
    [
        (planted_structure.UnrolledJax, "no scan consumes the weights"),
        (planted_structure.ScanWithoutCheckpoint, "is NOT checkpointed"),
        (planted_structure.TorchLoopWithoutCheckpoint, "is NOT checkpointed"),
        (planted_structure.InspectedIsNotRun, "`grad` does not return the gradient of `loss_fn()`"),
    ],
    ids=["unrolled-python-loop", "scan-without-checkpoint", "torch-loop-without-checkpoint", "loss-fn-lies"],
)
def test_planted_backends_are_flagged(planted, expected):
    pytest.importorskip("torch" if "Torch" in planted.__name__ else "jax")
    result = inspect_backend(planted(), WEIGHTS, X)
    assert not result.ok
    assert any(expected in p for p in result.problems), result.problems


@pytest.mark.parametrize(
    ("name", "recomputed"),
    [("jax", LAYERS), ("jax-plain", 0), ("jax-remat-scan", LAYERS), ("jax-segments", LAYERS)],
)
def test_jax_layer_products_run_again_for_backward(name, recomputed):
    found = inspect_backend(_load(name), WEIGHTS, X).found
    assert (found["forward_layers"], found["recomputed_layers"]) == (LAYERS, recomputed)


def test_unrolled_loop_is_seen_as_unrolled():
    pytest.importorskip("jax")
    found = inspect_backend(planted_structure.UnrolledJax(), WEIGHTS, X).found
    assert found["weight_scans"] == []
    assert found["weight_products_outside_scan"] >= LAYERS
    assert found["remat_count"] == LAYERS  # checkpointed per layer, only not in a scan


def test_jax_residuals_checkpointed_keep_layer_inputs_plain_also_masks():
    checkpointed = inspect_backend(_load("jax"), WEIGHTS, X).residuals
    plain = inspect_backend(_load("jax-plain"), WEIGHTS, X).residuals
    shapes = {(r.shape, r.dtype) for r in checkpointed if r.role == "activation"}
    # The layer inputs y_0 .. y_{L-1} stacked by the scan, and the loss's 2 * y_L.
    assert shapes == {((LAYERS, BATCH, DIM), "float32"), ((BATCH, DIM), "float32")}
    assert ((LAYERS, BATCH, DIM), "bool") in {(r.shape, r.dtype) for r in plain}  # the ReLU masks
    assert sum(r.nbytes for r in plain if r.role == "activation") > sum(
        r.nbytes for r in checkpointed if r.role == "activation"
    )


def test_jax_remat_scan_keeps_no_activation_per_layer():
    result = inspect_backend(_load("jax-remat-scan"), WEIGHTS, X)
    assert all(r.shape[0] != LAYERS for r in result.residuals if r.role == "activation")
    assert result.activation_bytes == 2 * ACTIVATION  # x and 2 * y_L


def test_torch_recomputes_every_layer_and_saves_only_checkpoint_inputs():
    result = inspect_backend(_load("torch"), WEIGHTS, X)
    assert result.found["forward_layers"] == LAYERS
    assert result.found["recomputed_layers"] == LAYERS
    assert result.found["checkpoint_inputs"] == LAYERS
    others = [r for r in result.residuals if r.origin != "checkpoint input"]
    assert [(r.shape, r.role) for r in others] == [((BATCH, DIM), "activation")]  # the loss's y_L
    plain = inspect_backend(_load("torch-plain"), WEIGHTS, X)
    assert plain.found["recomputed_layers"] == 0
    assert all(r.origin != "checkpoint input" for r in plain.residuals)


def test_torch_segments_recompute_all_but_the_last_segment():
    found = inspect_backend(_load("torch-segments"), WEIGHTS, X).found
    assert found["recomputed_layers"] == LAYERS - 2  # L = 4: segments of 2, the last one plain
    assert found["checkpoint_inputs"] == 1


@pytest.mark.parametrize("framework", ["jax", "torch"])
def test_checkpointed_and_plain_gradients_agree_to_the_bit(framework):
    # Recomputation runs the same kernels on the same inputs (CPU, deterministic): same bits.
    weights, x = crosscheck.make_inputs(crosscheck.Case(layers=8, batch=8, dim=16, seed=3))
    plain = _load(f"{framework}-plain").grad(weights, x)
    for name in (framework, f"{framework}-segments") + (("jax-remat-scan",) if framework == "jax" else ()):
        assert ulp_difference(_load(name).grad(weights, x), plain) == (0, 0.0), name


def test_ulp_difference_counts_entries_and_units_in_the_last_place():
    a = np.array([1.0, 2.0, 3.0], dtype=np.float32)
    b = a.copy()
    b[1] = np.nextafter(b[1], np.float32(4))
    b[2] = np.nextafter(np.nextafter(b[2], np.float32(4)), np.float32(4))
    assert ulp_difference(a, b) == (2, 2.0)


def test_a_backend_without_claims_or_framework_is_not_flagged():
    result = inspect_backend(crosscheck.load_backend("numpy-fd"), WEIGHTS, X)
    assert result.ok
    assert result.framework == ""
    assert "not inspectable" in result.evidence[0]


def test_grouped_counts_identical_residuals():
    result = inspect_backend(_load("torch"), WEIGHTS, X)
    counts = {(r.origin, r.role): n for n, r in grouped(result.residuals)}
    assert counts[("checkpoint input", "activation")] == LAYERS
    assert counts[("checkpoint input", "weights")] == LAYERS


def test_cli_inspect_exits_1_for_a_planted_backend(capsys):
    pytest.importorskip("jax")
    status = main(
        [
            "inspect",
            "--layers",
            "3",
            "--backend",
            "jax",
            "--backend",
            "planted_structure:ScanWithoutCheckpoint",
        ]
    )
    out = capsys.readouterr().out
    assert status == 1
    assert "scan-without-checkpoint (jax): NOT AS CLAIMED" in out
    assert "jax (jax): ok" in out
    assert "gradient vs jax-plain: bit for bit" in out


def test_cli_inspect_exits_0_and_writes_json(tmp_path, capsys):
    pytest.importorskip("torch")
    import json

    path = tmp_path / "inspect.json"
    assert main(["inspect", "--layers", "3", "--backend", "torch", "--json", str(path)]) == 0
    (record,) = json.loads(path.read_text())
    assert record["found"]["recomputed_layers"] == 3
    assert record["vs_plain"] == {"plain": "torch-plain", "entries_differ": 0, "max_ulps": 0.0}
    assert "PASSED: every claim holds" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["inspect", "--layers", "0"], "`--layers` must be at least 1, found 0."),
        (["inspect", "--backend", "nosuch"], "unknown backend `nosuch`"),
    ],
)
def test_cli_inspect_usage_errors_are_one_line(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err
    assert err.count("\n") == 1


@pytest.mark.parametrize("layers", [1, 2, 3])
@pytest.mark.parametrize("name", ["jax-segments", "torch-segments", "jax-remat-scan"])
def test_coarse_variants_hold_their_claims_at_small_depths(name, layers):
    weights, x = crosscheck.make_inputs(crosscheck.Case(layers=layers, batch=2, dim=3))
    result = inspect_backend(_load(name), weights, x)
    assert result.ok, result.problems


def test_an_unavailable_framework_keeps_the_extra_to_install_in_brackets(monkeypatch, capsys):
    # rich reads `[torch]` as markup and would drop it from `pip install 'crosscheck-gradients[torch]'`.
    import sys

    monkeypatch.delitem(sys.modules, "crosscheck.backends.torch.stack", raising=False)
    monkeypatch.setitem(sys.modules, "torch", None)
    assert main(["inspect", "--backend", "torch", "--layers", "2", "--dim", "2", "--batch", "1"]) == 1
    assert "crosscheck-gradients[torch]" in capsys.readouterr().out


class ExitsWhenInspected:
    """A PyTorch-claiming backend whose gradient calls sys.exit(0): inspecting it runs that code."""

    name = "exits-when-inspected"
    claims: ClassVar[dict] = {"framework": "torch", "checkpoint": "layer"}

    def grad(self, weights, x):
        raise SystemExit(0)


def test_inspect_reports_a_backend_that_exits_and_goes_on(capsys):
    pytest.importorskip("torch")
    from crosscheck._cli.main import main

    status = main(
        ["inspect", "--backend", "tests.evidence.test_inspect:ExitsWhenInspected", "--backend", "torch"]
    )
    out = capsys.readouterr().out
    assert status == 1
    assert "tests.evidence.test_inspect:ExitsWhenInspected: failed: SystemExit: 0 (sys.exit was called" in out
    assert "torch (torch): ok" in out  # the next backend was still inspected


@pytest.mark.parametrize(
    ("layers", "batch", "dim", "seed"), [(8, 4, 8, 0), (2, 3, 5, 7)], ids=["default", "other"]
)
def test_the_tools_make_the_stacks_arrays_through_the_workload_bit_for_bit(layers, batch, dim, seed):
    weights, x = stack_inputs(layers=layers, batch=batch, dim=dim, seed=seed)
    expected = crosscheck.make_inputs(crosscheck.Case(layers=layers, batch=batch, dim=dim, seed=seed))
    for got, want in zip((weights, x), expected, strict=True):
        assert got.dtype == want.dtype and got.shape == want.shape and got.tobytes() == want.tobytes()
