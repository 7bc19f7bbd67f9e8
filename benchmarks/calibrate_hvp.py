"""Calibrate the HVP tolerance: healthy random cases never fail, planted wrong HVPs are caught.

Run: ``PYTHONPATH=. python benchmarks/calibrate_hvp.py [--seeds 10] [--oracle-mode screen]`` (prints one
table; ``--oracle-mode screen`` calibrates the HVP's screening: docs/explanations/hvp-screening.md). Healthy
candidates are jax, torch and a hand-written NumPy HVP (tests/support/planted_hvp.py); the planted bugs
are the ones in that file. For each, the largest "difference / tolerance" over the cases (healthy: must stay
below 1) or the smallest worst ratio (planted: must stay above 1), and how many cases failed. A planted
bug is counted only on cases where it changes the HVP by more than 1e-4 of its largest entry.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import numpy as np
from planted_hvp import BUGS, CORRECT

import crosscheck
from crosscheck._workloads.stack.oracle.hvp import direction

SHAPES = [(2, 3, 2), (3, 4, 3), (4, 8, 6), (8, 8, 8), (8, 8, 16), (6, 16, 12)]


def _worst(comparison) -> float:
    """The worst difference / tolerance: of the entries judged, else (screened, no layer checked
    entry by entry) of the directions."""
    if comparison.worst_ratio is not None:
        return comparison.worst_ratio
    return max((row["worst_ratio"] for row in comparison.screening), default=0.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--oracle-mode", choices=("full", "screen"), default="full")
    args = parser.parse_args()
    healthy = ["jax", "torch", CORRECT]
    stats: dict[str, list] = {}
    unjudgeable = cases = 0
    start = time.perf_counter()
    for dtype in ("float32", "float64"):
        for layers, batch, dim in SHAPES:
            for seed in range(args.seeds):
                report = crosscheck.run(
                    quantity="hvp",
                    layers=layers,
                    batch=batch,
                    dim=dim,
                    dtype=dtype,
                    seed=seed,
                    oracle_mode=args.oracle_mode,
                    backends=healthy + BUGS,
                )
                cases += 1
                params, inputs = report.inputs
                weights, x = params["weights"], inputs["x"]
                v = direction(weights, seed)
                right = np.asarray(CORRECT.hvp(weights, x, v), np.float64)
                for c in report.comparisons:
                    if c.status == "unjudgeable":
                        unjudgeable += 1 if c.backend == "jax" else 0
                        continue
                    bug = next((b for b in BUGS if b.name == c.backend), None)
                    # A planted bug that changes nothing on this case (a dead stack, every mask on)
                    # cannot be caught by anyone: count only the cases where it changes the HVP.
                    if bug is not None:
                        wrong = np.asarray(bug.hvp(weights, x, v), np.float64)
                        if np.max(np.abs(wrong - right)) <= 1e-4 * np.max(np.abs(right), initial=0.0):
                            continue
                    stats.setdefault(c.backend, []).append((_worst(c), c.passed))
    print(
        f"{cases} cases ({len(SHAPES)} shapes x {args.seeds} seeds x float32/float64, gaussian, "
        f"oracle mode {args.oracle_mode}), "
        f"{unjudgeable} with every entry unjudgeable, {time.perf_counter() - start:.0f} s"
    )
    print(f"{'candidate':40s} {'kind':8s} {'cases':>6s} {'failed':>6s} {'max ratio':>10s} {'min ratio':>10s}")
    for name, rows in stats.items():
        kind = "healthy" if name in ("jax", "torch", "correct") else "planted"
        ratios = [r for r, _ in rows]
        failed = sum(not p for _, p in rows)
        print(f"{name:40s} {kind:8s} {len(rows):6d} {failed:6d} {max(ratios):10.3g} {min(ratios):10.3g}")


if __name__ == "__main__":
    main()
