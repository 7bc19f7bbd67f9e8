"""Calibration of the model oracle: healthy MLPs never fail, both planted bugs are always caught.

Run from the repository root: ``python benchmarks/calibrate_model_oracle.py [--seeds 50] [--sizes
1e3,1e4,1e5] [--dtypes float32]``. Every seed runs in this process, so each implementation is compiled
once (``crosscheck._workloads.model.workload._framework_backend`` keeps its adapter).

The models are ``benchmarks/bench_model_oracle.py``'s (``examples.no_reference.mlp``, no NumPy
reference, ``oracle_mode="auto"``). Per size and workload: the number of seeds, how many runs failed
(healthy: false alarms, must be 0) or were caught at the right place (the planted bugs: PyTorch's
derivative of ``w1`` off by 1e-3, a wrong custom backward in the first GELU; must be every seed), the
worst difference / tolerance over every seed, backend and parameter (healthy: must stay below 1) or the
weakest catch (the smallest, over seeds, of the largest ratio among the failing comparisons), and time.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.getcwd())
sys.path.insert(0, os.path.join(os.getcwd(), "benchmarks"))

from bench_model_oracle import BATCH, PLANTED, VARIANTS, WIDTHS

import crosscheck
from examples.no_reference import mlp


def calibrate(size: str, variant: str, dtype: str, seeds: int, directions: int) -> str:
    workload = mlp(WIDTHS[size], BATCH, **VARIANTS[variant])
    start, counted, extreme = time.perf_counter(), 0, None
    for seed in range(seeds):
        report = crosscheck.run(workload=workload, seed=seed, dtype=dtype, directions=directions)
        failing = [c for c in report.comparisons if not c.passed]
        where = {(c.backend, c.question) for c in failing}
        if variant == "healthy":
            counted += not report.passed
            worst = max([c.worst_ratio or 0.0 for c in report.comparisons])
            extreme = worst if extreme is None else max(extreme, worst)
            if not report.passed:
                print(f"  false alarm: seed {seed}: {report.problems[:2]}", flush=True)
            continue
        right = where == {("torch", "derivative")}
        if variant == "planted 1e-3":
            right = right and {c.parameter for c in failing} == {PLANTED}
        counted += right
        strongest = max([c.worst_ratio or 0.0 for c in failing], default=0.0)
        extreme = strongest if extreme is None else min(extreme, strongest)
        if not right:
            print(f"  not caught right: seed {seed}: {report.problems[:2]}", flush=True)
    what = "false alarms" if variant == "healthy" else "caught"
    ratio = "worst ratio" if variant == "healthy" else "weakest catch"
    return (
        f"| {size} | {dtype} | {variant} | {seeds} | {what} {counted} | {ratio} {extreme:.3g} | "
        f"{time.perf_counter() - start:.0f} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=50)
    parser.add_argument("--sizes", default="1e3,1e4,1e5")
    parser.add_argument("--dtypes", default="float32")
    parser.add_argument("--directions", type=int, default=4)
    parser.add_argument(
        "--torch-threads",
        type=int,
        default=1,
        help="PyTorch intra-op threads (default 1: these are statistics, not timings, and small models "
        "run faster on one thread of a shared machine)",
    )
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.torch_threads)
    print(
        f"# crosscheck model oracle calibration: {os.cpu_count()} CPUs, {args.seeds} seeds, "
        f"{args.torch_threads} torch thread(s)"
    )
    print("| size | dtype | workload | seeds | result | ratio | seconds |")
    print("|---|---|---|---|---|---|---|")
    for size in args.sizes.split(","):
        for dtype in args.dtypes.split(","):
            for variant in VARIANTS:
                print(calibrate(size, variant, dtype, args.seeds, args.directions), flush=True)


if __name__ == "__main__":
    main()
