"""Calibration of the workload tolerances: healthy ports never fail, the GELU port bug is always caught.

Run from the repository root: ``python benchmarks/calibrate_workloads.py [--seeds 50]``. Prints, per
workload and dtype, the worst difference / tolerance over every seed, backend and parameter (healthy:
must stay below 1) with the largest share of what float32 permits that a side's measured rounding used
(its typical entry; above 1 it would fail as "below float32 precision"), and for the buggy GELU port the
smallest (over seeds) of its largest ratio, with how often each parameter was flagged; and how often a
planted relative error at the largest entry of one parameter (in float32 and in float64 runs alike) is
caught.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.getcwd())

import numpy as np

import crosscheck
from crosscheck._workloads.model.workload import _framework_backend
from examples import healthy
from examples.gelu_port import mlp_buggy, mlp_fixed


def healthy_rows(seeds: int):
    for workload in [mlp_fixed.workload, *healthy.WORKLOADS]:
        for dtype in ("float32", "float64"):
            start, worst, failed, unjudged, used = time.perf_counter(), 0.0, 0, 0, 0.0
            for seed in range(seeds):
                report = crosscheck.run(workload=workload, seed=seed, dtype=dtype)
                failed += not report.passed
                unjudged += sum(c.unjudgeable for c in report.comparisons)
                worst = max([worst] + [c.worst_ratio or 0.0 for c in report.comparisons])
                notes = [b.notes.get("rounding_of_permitted", 0.0) for b in report.backends.values()]
                used = max([used, *notes])
            yield workload.name, dtype, seeds, failed, unjudged, worst, used, time.perf_counter() - start


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


class Planted:
    """The JAX implementation with one entry, the largest of one parameter, off by a relative ``error``."""

    def __init__(self, workload, parameter: str, error: float) -> None:
        self.inner = _framework_backend("jax", workload.implementations["jax"])
        self.parameter, self.error, self.name = parameter, error, "planted"

    def grad(self, params, inputs):
        grads = dict(self.inner.grad(params, inputs))
        value = np.array(grads[self.parameter])
        value.flat[int(np.argmax(np.abs(value)))] *= 1 + self.error
        grads[self.parameter] = value
        return grads


PLANTED = {"float32": 1e-4, "float64": 1e-8}


def planted_rows(seeds: int):
    for workload in [mlp_fixed.workload, *healthy.WORKLOADS]:
        for dtype, error in PLANTED.items():
            caught = total = 0
            for seed in range(seeds):
                for parameter in workload.parameters:
                    report = crosscheck.run(
                        workload=workload,
                        seed=seed,
                        dtype=dtype,
                        backends=[Planted(workload, parameter, error)],
                    )
                    caught += any(not c.passed for c in report.comparisons if c.parameter == parameter)
                    total += 1
            yield workload.name, dtype, error, caught, total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=50)
    parser.add_argument("--sections", default="healthy,bug,planted", help="comma-separated")
    parser.add_argument("--planted-seeds", type=int, default=10)
    args = parser.parse_args()
    seeds, sections = args.seeds, args.sections.split(",")
    if "planted" in sections:
        print("| planted error at the largest entry of one parameter | dtype | relative error | caught |")
        print("|---|---|---|---|")
        for name, dtype, error, caught, total in planted_rows(args.planted_seeds):
            print(f"| {name} | {dtype} | {error:g} | {caught} / {total} |")
        print()
    if "healthy" in sections:
        print(
            "| healthy workload | dtype | seeds | failed | unjudgeable entries | worst diff/tol "
            "| rounding of permitted | seconds |"
        )
        print("|---|---|---|---|---|---|---|---|")
        for name, dtype, n, failed, unjudged, worst, used, seconds in healthy_rows(seeds):
            print(
                f"| {name} | {dtype} | {n} | {failed} | {unjudged} | {worst:.3g} | {used:.3g} "
                f"| {seconds:.1f} |"
            )
        print()
    if "bug" in sections:
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
