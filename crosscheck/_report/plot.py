"""``--plot``: heatmaps of each comparison's error in units of its tolerance (matplotlib).

Every comparison whose per-entry arrays have two or more axes is drawn: its last two axes as an image
(rows and columns labelled with the comparison's index names, or "axis 0", "axis 1"), one panel per
index of the axes before them (the stack's layers). A parameter of one axis (a bias) has no image; the
figure lists those it leaves out.

One meaning per colour: the blue-white-red scale is ``log10(|difference| / tolerance)`` of a judged entry
(white: at its tolerance; red: past it); black is exact agreement (no difference at all, which the scale
would show as its bluest end); gold is an entry the oracle cannot judge (a ReLU kink: unjudgeable);
light grey an entry that was not checked (screening checked only the layers whose directions failed).
"""

from __future__ import annotations

import itertools
import math
import textwrap
from pathlib import Path
from typing import Any

import numpy as np

from crosscheck._backends import ORACLE
from crosscheck._compare.record import Comparison
from crosscheck._report.report import Report
from crosscheck._report.text import plain

#: Colour range, in decades of difference / tolerance: 1e-4 (deep blue) to 1e4 (deep red); 1 is white.
DECADES = 4
#: At most this many panels per comparison (the first ones, in index order); the figure says so.
MAX_PANELS = 16
#: Entries off the scale, one colour each: (colour, legend).
EXACT = ("black", "exactly equal (no difference)")
UNJUDGEABLE = ("#e6ab02", "unjudgeable (a ReLU kink)")
NOT_CHECKED = ("#d9d9d9", "not checked (outside the layers screening checked entry by entry)")


def plottable(report: Report) -> tuple[list[Comparison], list[Comparison]]:
    """``(shown, left out)``: comparisons with per-entry arrays of two or more axes, and those of fewer."""
    with_arrays = [c for c in report.comparisons if "ratio" in c.arrays]
    shown = [c for c in with_arrays if np.ndim(c.arrays["ratio"]) >= 2]
    return shown, [c for c in with_arrays if np.ndim(c.arrays["ratio"]) < 2]


def write_plot(report: Report, path: str | Path) -> int:
    """Write the PNG; return how many comparisons it shows (0: nothing to draw, no file written).

    Raises:
        ImportError: matplotlib is not installed.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import TwoSlopeNorm

    shown, left_out = plottable(report)
    if not shown:
        return 0
    rows: dict[str, list[tuple[Comparison, tuple[Any, ...]]]] = {}  # a row of panels per backend
    for c in shown:
        rows.setdefault(c.backend, []).extend((c, panel) for panel in _slices(c))
    columns = max(len(panels) for panels in rows.values())
    width = max(2.2 * columns + 1.4, 7.0)
    fig, axes = plt.subplots(
        len(rows),
        columns,
        figsize=(width, 2.4 * len(rows) + 1.2),
        squeeze=False,
        constrained_layout=True,
    )
    scale = ScalarMappable(TwoSlopeNorm(vmin=-DECADES, vcenter=0, vmax=DECADES), plt.get_cmap("RdBu_r"))
    for row, panels in zip(axes, rows.values(), strict=True):
        for ax, (c, panel) in zip(row, panels, strict=False):
            _panel(ax, c, panel, scale)
        for ax in row[len(panels) :]:
            ax.set_visible(False)
    bar = fig.colorbar(scale, ax=axes, shrink=0.8, ticks=range(-DECADES, DECADES + 1, 2))
    bar.ax.set_yticklabels([f"1e{k}" if k else "1: tolerance" for k in range(-DECADES, DECADES + 1, 2)])
    bar.ax.tick_params(labelsize=7)
    bar.set_label("|difference| / tolerance (above 1: mismatch)", fontsize=8)
    fig.legend(handles=_legend(), loc="outside lower center", ncols=2, fontsize=7, frameon=False)
    fig.suptitle(_title(report, shown, left_out, chars=int(12 * width)), fontsize=9)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return len(shown)


def _panels(c: Comparison) -> int:
    """Panels of a comparison: one per index of the axes before the last two."""
    return math.prod(np.shape(c.arrays["ratio"])[:-2])


def _slices(c: Comparison) -> list[tuple[Any, ...]]:
    """``(leading index, ratio, unjudgeable, two-sided)`` per panel (the first ``MAX_PANELS``), 2-D each."""
    ratio = np.asarray(c.arrays["ratio"])
    unjudgeable, two_sided = np.asarray(c.arrays["unjudgeable"]), np.asarray(c.arrays["two_sided"])
    wheres = list(itertools.islice(np.ndindex(*ratio.shape[:-2]), MAX_PANELS))
    return [(where, ratio[where], unjudgeable[where], two_sided[where]) for where in wheres]


def _panel(ax: Any, c: Comparison, panel: tuple[Any, ...], scale: Any) -> None:
    """One 2-D slice (``_slices``) as an image: judged entries on the scale, the others in their own
    colours, entries judged on both sides of a kink dotted."""
    where, ratio, unjudgeable, two_sided = panel
    names = axis_names(c)
    ax.imshow(_colours(ratio, unjudgeable, scale), interpolation="nearest", aspect="auto")
    rows, cols = np.nonzero(two_sided)
    if rows.size:
        ax.scatter(cols, rows, marker=".", s=12, c="k", linewidths=0.8)
    leading = ", ".join(f"{n} {i}" for n, i in zip(names, where, strict=False))
    label = " ".join(text(s) for s in (c.backend, c.parameter or "") if s)
    ax.set_title(label + (f": {leading}" if leading else ""), fontsize=8)
    ax.set_ylabel(names[-2], fontsize=7)
    ax.set_xlabel(names[-1], fontsize=7)
    ax.set_yticks(_ticks(ratio.shape[0]))
    ax.set_xticks(_ticks(ratio.shape[1]))
    ax.tick_params(labelsize=6)


def _colours(ratio: np.ndarray, unjudgeable: np.ndarray, scale: Any) -> np.ndarray:
    """RGBA per entry: judged ones on the scale (clipped to +-DECADES), exact agreement, unjudgeable
    and not-checked entries each in their own colour."""
    from matplotlib.colors import to_rgba

    with np.errstate(divide="ignore", invalid="ignore"):
        decades = np.clip(np.log10(ratio), -DECADES, DECADES)
    rgba = scale.to_rgba(np.nan_to_num(decades, nan=0.0))
    judged = ~np.isnan(ratio)  # inf (a difference where the tolerance is 0) is judged: deep red
    for mask, (colour, _) in (
        (judged & (ratio == 0), EXACT),
        (~judged & unjudgeable, UNJUDGEABLE),
        (~judged & ~unjudgeable, NOT_CHECKED),
    ):
        rgba[mask] = to_rgba(colour)
    return rgba


def _legend() -> list[Any]:
    """Legend entries for the colours off the scale and the two-sided marker."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    patches = [
        Patch(facecolor=colour, edgecolor="0.5", label=label)
        for colour, label in (EXACT, UNJUDGEABLE, NOT_CHECKED)
    ]
    dot = Line2D([], [], marker=".", color="k", linestyle="", label="judged on both sides of a kink")
    return [*patches, dot]


def _ticks(n: int) -> list[int]:
    """Evenly spaced integer ticks from 0, about five of them."""
    return list(range(0, n, max(1, math.ceil((n - 1) / 4))))


def axis_names(c: Comparison) -> list[str]:
    """The comparison's index names where it has one per axis, else ``axis 0``, ``axis 1``, ..."""
    ndim = np.ndim(c.arrays["ratio"])
    if c.index_names and len(c.index_names) == ndim:
        return [text(n) for n in c.index_names]
    return [f"axis {k}" for k in range(ndim)]


def _title(report: Report, shown: list[Comparison], left_out: list[Comparison], *, chars: int) -> str:
    """One line (the case's short values and the reference these differences are against), then a
    line for what is not shown, if anything is; lines of at most ``chars`` characters."""
    lines = [textwrap.shorten(text(plot_title(report)), chars, placeholder=" ...")]
    if any(_panels(c) > MAX_PANELS for c in shown):
        lines.append(f"the first {MAX_PANELS} panels of each comparison are shown")
    if left_out:
        names = ", ".join(text(f"{c.backend} {c.parameter or ''}".strip()) for c in left_out)
        left = f"not shown (one axis, no image), {len(left_out)}: {names}"
        lines.append(textwrap.shorten(left, chars, placeholder=" ..."))
    return "\n".join(lines)


#: A case value longer than this is left out of the plot's title (a port's loss in words: the JSON
#: report and the terminal's title have it).
SHORT = 24


def plot_title(report: Report) -> str:
    """``each candidate against `torch`; workload=convnet, dtype=float32, seed=0``: the
    reference the differences are against first (the oracle only where it was the reference), then the
    case's short values (a title too long for the figure loses them from the end)."""
    values = [
        f"{k}={v}"
        for k, v in report.case.items()
        if isinstance(v, (str, int, float)) and len(str(v)) <= SHORT and not k.endswith("sha256")
    ]
    ref = report.reference
    against = f"`{ref}` (the oracle)" if ref == ORACLE else f"`{ref}`"
    return f"each candidate against {against}; {', '.join(values)}"


def text(value: Any) -> str:
    """Text from a backend or workload as matplotlib shows it literally: no control characters, and
    ``$`` escaped (two of them would start mathtext)."""
    return plain(value).replace("$", r"\$")
