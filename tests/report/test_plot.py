"""--plot: the PNG exists, is a real image, shows a planted error in red where it was planted, and gives
exact agreement, unjudgeable entries and entries screening did not check one colour each."""

from __future__ import annotations

import sys

import numpy as np
import planted
import pytest

import crosscheck
from crosscheck._cli.main import main
from crosscheck._engine.execute import execute
from crosscheck._engine.request import Request

matplotlib = pytest.importorskip("matplotlib")


def _off_at(weights, x):
    g = planted.correct(weights, x)
    g[2, 3, 5] *= 1.01
    return g


def test_plot_shows_the_planted_error(tmp_path):
    from matplotlib.image import imread

    from crosscheck._report.plot import write_plot

    # As --plot asks (the request's ``plot``): comparisons keep no per-entry array otherwise.
    knobs = {"layers": 4, "dim": 12, "batch": 8}
    report = execute(Request(workload_options=knobs, backends=[planted.correct, _off_at], plot=True))
    path = tmp_path / "p.png"
    assert write_plot(report, path) == 2
    image = imread(path)[..., :3]
    assert image.shape[0] > 200 and image.shape[1] > 600
    red = (image[..., 0] > 0.6) & (image[..., 1] < 0.5) & (image[..., 2] < 0.5)
    blue = (image[..., 2] > 0.5) & (image[..., 0] < 0.4)
    assert blue.sum() > 1000  # agreeing entries
    assert 0 < red.sum() < 2000  # the one planted error (and the colour bar's red end)


def test_cli_plot_and_missing_matplotlib(tmp_path, monkeypatch, capsys):
    path = tmp_path / "p.png"
    assert (
        main(["run", "--layers", "2", "--dim", "3", "--backend", "numpy-fd", "--plot", str(path), "--quiet"])
        == 0
    )
    assert path.stat().st_size > 10_000
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert main(["run", "--layers", "2", "--dim", "3", "--plot", str(tmp_path / "q.png")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == (
        "crosscheck: error: `--plot` needs matplotlib, which is not installed: "
        "from a clone: pip install '.[plot]'; once published: pip install 'crosscheck-gradients[plot]'."
    )
    assert not (tmp_path / "q.png").exists()


def test_one_meaning_per_colour():
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import TwoSlopeNorm, to_rgba

    from crosscheck._report import plot

    scale = ScalarMappable(TwoSlopeNorm(vmin=-4, vcenter=0, vmax=4), "RdBu_r")
    ratio = np.array([[0.0, 1e-5, 1.0, np.inf], [np.nan, np.nan, 1e3, 1e-2]])
    unjudgeable = np.array([[False, False, False, False], [True, False, False, False]])
    rgba = plot._colours(ratio, unjudgeable, scale)
    assert tuple(rgba[0, 0]) == to_rgba(plot.EXACT[0])  # exact agreement: its own colour ...
    assert tuple(rgba[0, 1]) == tuple(scale.to_rgba(-4.0))  # ... not the scale's bluest end
    assert tuple(rgba[0, 1]) != tuple(rgba[0, 0])
    assert tuple(rgba[1, 0]) == to_rgba(plot.UNJUDGEABLE[0])
    assert tuple(rgba[1, 1]) == to_rgba(plot.NOT_CHECKED[0])  # not checked by screening: another colour
    assert len({plot.EXACT[0], plot.UNJUDGEABLE[0], plot.NOT_CHECKED[0]}) == 3
    assert tuple(rgba[0, 3]) == tuple(scale.to_rgba(4.0))  # a difference where the tolerance is 0: red
    assert rgba[1, 2, 0] > 0.5 > rgba[1, 2, 2]  # past the tolerance: red
    assert rgba[1, 3, 2] > 0.5 > rgba[1, 3, 0]  # within it: blue


def test_a_screened_run_draws_unchecked_layers_grey(tmp_path):
    from matplotlib.colors import to_rgba
    from matplotlib.image import imread

    from crosscheck._report import plot

    def off_in_layer_1(weights, x):
        g = planted.correct(weights, x)
        g[1] *= 1.001
        return g

    knobs = {"layers": 3, "dim": 24, "batch": 8}
    screen = crosscheck.Oracle("screen")
    report = execute(Request(workload_options=knobs, oracle=screen, backends=[off_in_layer_1], plot=True))
    (c,) = report.comparisons
    assert "layers checked entry by entry: [1]; spot-checked: 16 entries" in c.coverage
    assert plot.write_plot(report, tmp_path / "p.png") == 1
    image = imread(tmp_path / "p.png")[..., :3]
    grey = np.all(np.abs(image - np.array(to_rgba(plot.NOT_CHECKED[0])[:3])) < 0.02, axis=-1)
    assert grey.sum() > 2 * 5000  # layers 0 and 2, not checked entry by entry, drawn grey


@pytest.mark.parametrize(
    ("reference", "against"),
    [
        ("torch", "each candidate against `torch`; "),
        ("numpy-fd", "each candidate against `numpy-fd` (the oracle); "),
    ],
    ids=["a-backend", "the-oracle"],
)
def test_the_title_is_one_line_naming_the_reference(reference, against):
    from crosscheck._report.plot import _title
    from crosscheck._report.report import Report

    case = {
        "workload": "convnet",
        "dtype": "float32",
        "seed": 0,
        "parameters": ["conv1.weight", "conv1.bias"],
        "loss": "projection of every output array: sum_i sum(R_i * output_i), R_i ~ N(0, 1) seed 0 + i",
        "oracle_differentiates": "nothing: no oracle ran (a backend is the reference)",
    }
    line = _title(Report(case=case, backends={}, comparisons=[], reference=reference), [], [], chars=120)
    assert line == f"{against}workload=convnet, dtype=float32, seed=0"
    assert (reference == "torch") == ("oracle" not in line)  # the oracle only where it was the reference
