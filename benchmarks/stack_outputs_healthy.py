"""The healthy stack through the oracle from the layers' outputs (``--oracle-mode outputs``): no false alarm.

Run from the repository root: ``python benchmarks/stack_outputs_healthy.py [--dims 128,256] [--seeds
0,1,2] [--json records.jsonl]``. For every width, init (gaussian, identity, integer, nearzero), dtype
(float32, float64, bfloat16) and seed, ``crosscheck.run(dim=D, batch=8, backends=["jax", "torch"],
oracle_mode="outputs")``; prints one line a run and, at the end, the comparisons that failed (none
expected), the largest worst ratio per dtype and the share of entries unjudgeable.
"""

from __future__ import annotations

import argparse
import collections
import itertools
import json
import os
import sys
import time
import warnings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT]

import crosscheck  # noqa: E402

INITS = ("gaussian", "identity", "integer", "nearzero")
DTYPES = ("float32", "float64", "bfloat16")


def record(dim: int, init: str, dtype: str, seed: int) -> dict:
    start = time.perf_counter()
    report = crosscheck.run(
        dim=dim, batch=8, init=init, dtype=dtype, seed=seed, backends=["jax", "torch"], oracle_mode="outputs"
    )
    return {
        "dim": dim,
        "init": init,
        "dtype": dtype,
        "seed": seed,
        "passed": report.passed,
        "seconds": round(time.perf_counter() - start, 1),
        "problems": report.problems,
        "candidates": {
            c.backend: {
                "passed": c.passed,
                "worst_ratio": c.worst_ratio,
                "unjudgeable": c.unjudgeable,
                "total": c.total,
            }
            for c in report.comparisons
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dims", default="128,256")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--json", help="append each run's record to this file (JSON lines)")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    dims, seeds = (list(map(int, given.split(","))) for given in (args.dims, args.seeds))
    found = []
    for dim, init, dtype, seed in itertools.product(dims, INITS, DTYPES, seeds):
        found.append(record(dim, init, dtype, seed))
        print(
            dim, init, dtype, seed, "PASSED" if found[-1]["passed"] else "FAILED", found[-1]["seconds"], "s"
        )
        if args.json:
            with open(args.json, "a") as file:
                file.write(json.dumps(found[-1]) + "\n")
    comparisons = [(r, name, c) for r in found for name, c in r["candidates"].items()]
    failed = [
        (r["dim"], r["init"], r["dtype"], r["seed"], name) for r, name, c in comparisons if not c["passed"]
    ]
    print(f"{len(found)} runs, {len(comparisons)} comparisons, failed: {failed or 'none'}")
    by_dtype = collections.defaultdict(list)
    for r, _, c in comparisons:
        by_dtype[r["dtype"]].append(c)
    for dtype, found_c in by_dtype.items():
        worst = max((c["worst_ratio"] or 0.0) for c in found_c)
        share = sum(c["unjudgeable"] for c in found_c) / sum(c["total"] for c in found_c)
        print(f"{dtype}: largest worst ratio {worst:.3g}, unjudgeable {share:.1%}")


if __name__ == "__main__":
    main()
