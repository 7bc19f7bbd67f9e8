"""``--plot``: one heatmap per layer and candidate of the error in units of its tolerance (matplotlib)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from crosscheck._report.report import Report

#: Colour range, in decades of difference / tolerance: 1e-4 (deep blue) to 1e4 (deep red); 1 is white.
DECADES = 4


def write_plot(report: Report, path: str | Path) -> int:
    """Write the PNG; return how many candidates it shows.

    Raises:
        ImportError: matplotlib is not installed.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import TwoSlopeNorm

    shown = [c for c in report.comparisons if "ratio" in c.arrays]
    if not shown:
        return 0
    layers = shown[0].arrays["ratio"].shape[0]
    fig, axes = plt.subplots(
        len(shown),
        layers,
        figsize=(1.9 * layers + 1.2, 2.1 * len(shown) + 0.8),
        squeeze=False,
        constrained_layout=True,
    )
    norm = TwoSlopeNorm(vmin=-DECADES, vcenter=0, vmax=DECADES)
    # Grey: entries not judged (unjudgeable, or not checked by screening).
    cmap = plt.get_cmap("RdBu_r").with_extremes(bad="0.8")
    image = None
    for row, c in zip(axes, shown, strict=True):
        with np.errstate(divide="ignore"):
            decades = np.clip(np.log10(c.arrays["ratio"]), -DECADES, DECADES)
        for k, ax in enumerate(row):
            image = ax.imshow(decades[k], cmap=cmap, norm=norm, interpolation="nearest")
            for mask, marker, label in (
                (c.arrays["unjudgeable"][k], "x", "unjudgeable"),
                (c.arrays["two_sided"][k], ".", "judged on both sides of a kink"),
            ):
                rows_, cols_ = np.nonzero(mask)
                if rows_.size:
                    ax.scatter(cols_, rows_, marker=marker, s=12, c="k", linewidths=0.8, label=label)
            ax.set_title(f"{c.backend}: layer {k}", fontsize=8)
            ax.set_xticks([])
            ax.set_yticks([])
    bar = fig.colorbar(image, ax=axes, shrink=0.8)
    bar.set_label("log10(|difference| / tolerance); above 0 mismatches")
    case = ", ".join(f"{k}={v}" for k, v in report.case.items() if not k.endswith("sha256"))
    fig.suptitle(
        f"crosscheck vs {report.reference}: {case}\nx: unjudgeable (ReLU kinks), ·: judged on both "
        f"sides of a kink; grey: not checked",
        fontsize=9,
    )
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return len(shown)
