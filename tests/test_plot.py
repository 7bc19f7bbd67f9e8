"""--plot: the PNG exists, is a real image, and shows a planted error in red where it was planted."""

from __future__ import annotations

import sys

import planted
import pytest

import crosscheck
from crosscheck._cli.main import main

matplotlib = pytest.importorskip("matplotlib")


def _off_at(weights, x):
    g = planted.correct(weights, x)
    g[2, 3, 5] *= 1.01
    return g


def test_plot_shows_the_planted_error(tmp_path):
    from matplotlib.image import imread

    from crosscheck._report.plot import write_plot

    report = crosscheck.run(layers=4, dim=12, batch=8, backends=[planted.correct, _off_at])
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
        "pip install 'crosscheck-gradients[plot]'; from a clone: pip install '.[plot]'."
    )
    assert not (tmp_path / "q.png").exists()
