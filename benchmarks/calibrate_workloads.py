"""Calibration of the workload tolerances: healthy ports never fail, the GELU port bug is always caught.

Run from the repository root: ``python benchmarks/calibrate_workloads.py [--seeds 50]``. Prints, per
workload and dtype, the worst difference / tolerance over every seed, backend and parameter (healthy:
must stay below 1), and for the buggy GELU port the smallest (over seeds) of its largest ratio, with
how often each parameter was flagged.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.getcwd())

import crosscheck
from examples import healthy
from examples.gelu_port import mlp_buggy, mlp_fixed


def healthy_rows(seeds: int):
    for workload in [mlp_fixed.workload, *healthy.WORKLOADS]:
        for dtype in ("float32", "float64"):
            start, worst, failed, unjudged = time.perf_counter(), 0.0, 0, 0
            for seed in range(seeds):
                report = crosscheck.run(workload=workload, seed=seed, dtype=dtype)
                failed += not report.passed
                unjudged += sum(c.unjudgeable for c in report.comparisons)
                worst = max([worst] + [c.worst_ratio or 0.0 for c in report.comparisons])
            yield workload.name, dtype, seeds, failed, unjudged, worst, time.perf_counter() - start


def bug_rows(seeds: int):
    for dtype in ("float32", "float64"):
        weakest, caught, flagged = float("inf"), 0, {}
        for seed in range(seeds):
            report = crosscheck.run(workload=mlp_buggy.workload, seed=seed, dtype=dtype, backends=["jax"])
            caught += not report.passed
            weakest = min(weakest, max(c.worst_ratio or 0.0 for c in report.comparisons))
            for c in report.comparisons:
                flagged[c.parameter] = flagged.get(c.parameter, 0) + (not c.passed)
        yield dtype, seeds, caught, weakest, flagged


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=50)
    seeds = parser.parse_args().seeds
    print("| healthy workload | dtype | seeds | failed | unjudgeable entries | worst diff/tol | seconds |")
    print("|---|---|---|---|---|---|---|")
    for name, dtype, n, failed, unjudged, worst, seconds in healthy_rows(seeds):
        print(f"| {name} | {dtype} | {n} | {failed} | {unjudged} | {worst:.3g} | {seconds:.1f} |")
    print()
    print(
        "| buggy GELU port (jax) | seeds | caught | smallest largest diff/tol "
        "| runs flagging each parameter |"
    )
    print("|---|---|---|---|---|")
    for dtype, n, caught, weakest, flagged in bug_rows(seeds):
        shown = ", ".join(f"{k} {v}" for k, v in flagged.items())
        print(f"| {dtype} | {n} | {caught} | {weakest:.3g} | {shown} |")


if __name__ == "__main__":
    main()
