"""`crosscheck memory`: residual bytes over depth (deterministic), and one tiny child-process peak."""

from __future__ import annotations

import pytest

from crosscheck._cli.main import main
from crosscheck._evidence.memory import measure_peak, residual_table

pytest.importorskip("jax")
pytest.importorskip("torch")

DEPTHS = (4, 8, 16)
BATCH, WIDTH = 4, 8
ACTIVATION = BATCH * WIDTH * 4


@pytest.fixture(scope="module")
def rows():
    table = residual_table(
        variants=(
            "jax-plain",
            "jax",
            "jax-remat-scan",
            "jax-segments",
            "torch-plain",
            "torch",
            "torch-segments",
        ),
        depths=DEPTHS,
        widths=(WIDTH,),
        batch=BATCH,
    )
    return {row.variant: row for row in table}


def test_bytes_per_layer_in_activations(rows):
    # JAX plain keeps each layer's input (float32) and its ReLU mask (bool, a quarter of that);
    # checkpointed per layer, only the input; around the whole scan, nothing per layer.
    assert rows["jax-plain"].per_layer_activations == pytest.approx(1.25)
    assert rows["jax"].per_layer_activations == pytest.approx(1.0)
    assert rows["jax-remat-scan"].per_layer_activations == pytest.approx(0.0, abs=1e-9)
    # PyTorch saves each layer's input and ReLU output, which is the next layer's input: checkpointing
    # this layer keeps exactly the same tensors (as checkpoint inputs).
    assert rows["torch-plain"].per_layer_activations == pytest.approx(1.0)
    assert rows["torch"].per_layer_activations == pytest.approx(1.0)


def test_ordering_at_the_largest_depth(rows):
    deepest = max(DEPTHS)
    jax = [rows[v].bytes_by_depth[deepest] for v in ("jax-plain", "jax", "jax-segments", "jax-remat-scan")]
    assert jax == sorted(jax, reverse=True) and len(set(jax)) == 4
    assert rows["torch"].bytes_by_depth == rows["torch-plain"].bytes_by_depth
    assert rows["torch-segments"].bytes_by_depth[deepest] < rows["torch-plain"].bytes_by_depth[deepest]
    assert rows["jax"].ratio == pytest.approx((deepest + 1) / (1.25 * deepest + 2))
    assert rows["torch"].ratio == 1.0
    assert rows["jax-plain"].recomputed == 0 and rows["jax"].recomputed == deepest


def test_exact_bytes_of_the_checkpointed_jax_stack(rows):
    # Layer inputs y_0 .. y_{L-1} and the loss's 2 * y_L: (L + 1) activations.
    assert rows["jax"].bytes_by_depth == {L: (L + 1) * ACTIVATION for L in DEPTHS}


def test_peak_in_a_child_process_tiny():
    peak = measure_peak("jax", layers=4, batch=64, dim=8)
    assert "error" not in peak, peak
    assert peak["xla_temp_bytes"] > 4 * 64 * 8 * 4  # at least the layer inputs
    assert peak["peak_rss_growth_bytes"] >= 0


def test_cli_memory_without_peak(capsys):
    status = main(
        [
            "memory",
            "--no-peak",
            "--variant",
            "jax",
            "--variant",
            "jax-plain",
            "--depths",
            "2",
            "4",
            "--widths",
            "4",
            "--batch",
            "2",
        ]
    )
    out = capsys.readouterr().out
    assert status == 0
    assert "residual bytes kept from forward to backward" in out
    assert "jax-plain" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["memory", "--depths", "0"], "`--depths` must be at least 1, found 0."),
        (["memory", "--variant", "nosuch", "--no-peak"], "unknown backend `nosuch`"),
        (["memory", "--widths"], "expected at least one argument"),
        (["memory", "--variant", "numpy-fd", "--no-peak", "--depths", "2"], "`numpy-fd` cannot be measured"),
    ],
)
def test_cli_memory_usage_errors_are_one_line(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err
    assert err.count("\n") == 1


def test_cli_memory_repeated_depths_widths_and_variants_are_counted_once(tmp_path, capsys):
    import json
    import warnings

    path = tmp_path / "memory.json"
    argv = ["memory", "--no-peak", "--variant", "jax", "--variant", "jax", "--depths", "4", "2", "4"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a fit over one repeated depth warned (RankWarning)
        status = main([*argv, "--widths", "4", "4", "--batch", "2", "--json", str(path)])
    out = capsys.readouterr().out
    assert status == 0
    header = next(line for line in out.splitlines() if "variant" in line)
    assert header.count("L=4") == 1
    assert header.index("L=2") < header.index("L=4")
    rows = json.loads(path.read_text())["residuals"]
    assert len(rows) == 1
    assert list(rows[0]["bytes_by_depth"]) == ["2", "4"]
    assert rows[0]["bytes_per_layer"] > 0


def test_cli_memory_single_depth_shows_no_slope(capsys):
    status = main(
        ["memory", "--no-peak", "--variant", "jax", "--depths", "4", "--widths", "4", "--batch", "2"]
    )
    out = capsys.readouterr().out
    assert status == 0
    row = next(line for line in out.splitlines() if line.startswith("│ jax"))
    cells = [cell.strip() for cell in row.strip("│").split("│")]
    assert cells[4:6] == ["-", "-"]  # per layer, act/layer: not a slope of zero, no slope at all
