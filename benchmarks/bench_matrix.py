"""Expanding a sweep's matrix: ``crosscheck._sweep.config.cases`` against the quadratic de-duplication
it replaced (``if case not in out``, a list scan per case), side by side, for 10**4 and 2 * 10**4 cases
(and 10**5 for the linear one alone).

Usage: ``python benchmarks/bench_matrix.py``. Quote the output with the machine, its load (``uptime``)
and the date.
"""

from __future__ import annotations

import itertools
import os
import platform
import time

from crosscheck._sweep.config import MATRIX_DEFAULTS, MATRIX_KEYS, SweepConfig, cases


def quadratic(config: SweepConfig) -> list[dict]:
    """The expansion as it was: the same cases, duplicates dropped by scanning the list so far."""
    lists = [config.get(key, MATRIX_DEFAULTS[key]) for key in MATRIX_KEYS]
    out: list[dict] = []
    for values in itertools.product(*lists):
        row = dict(zip(MATRIX_KEYS, values, strict=True))
        case = {"workload": "stack", "layers": row["layers"], "batch": row["batch"], "dim": row["dim"],
                "dtype": row["dtypes"], "seed": row["seeds"], "init": row["inits"], "scale": 1.0}  # fmt: skip
        if case not in out:
            out.append(case)
    return out


def timed(fn, config) -> tuple[float, int]:
    start = time.perf_counter()
    n = len(fn(config))
    return time.perf_counter() - start, n


def main() -> None:
    print(f"{'cases':>8} {'before (s)':>11} {'now (s)':>9}")
    for n in (10_000, 20_000, 100_000):
        config = SweepConfig().merged({"seeds": list(range(n))})
        now, found = timed(lambda c: cases(c, limit=None), config)
        before = f"{timed(quadratic, config)[0]:.2f}" if n <= 20_000 else "-"
        print(f"{found:>8} {before:>11} {now:>9.3f}")
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"{platform.platform()}, {os.cpu_count()} CPUs, load {load}, {time.strftime('%Y-%m-%d %H:%M')}")


if __name__ == "__main__":
    main()
