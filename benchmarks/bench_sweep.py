"""Cases per second of ``crosscheck sweep``, serial against parallel, on the same matrix, side by side.

Runs one matrix (by default the 16 stack cases L = 8, N = 8, d in {8, 16}, seeds 0-3, float32 and
float64, backends jax and torch against the numpy-fd oracle) four ways:

* in this process, one case after the other (``jobs=0``: no start-up, no isolation);
* one worker process (``jobs=1``: what isolation from crashes costs);
* ``--jobs`` worker processes (default: the number of CPUs);
* a Dask ``LocalCluster`` with as many one-thread worker processes (its start-up is timed apart).

Every way pays its own imports of JAX and PyTorch (each worker process imports them, and compiles its own
JAX functions), as a real sweep does. The per-case records are compared across the ways (timing and the
environment record aside); the last column says whether they are identical.

Threads: BLAS and OpenMP run single-threaded unless ``OMP_NUM_THREADS`` / ``OPENBLAS_NUM_THREADS`` /
``MKL_NUM_THREADS`` are set by the caller, so that parallel processes do not fight over cores (Dask sets
the same in its workers).

Usage: ``python benchmarks/bench_sweep.py [--dims 8 16] [--seeds 4] [--jobs N] [--skip-dask]``.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import argparse
import time

from rich.console import Console
from rich.table import Table

from crosscheck._sweep.config import SweepConfig, cases
from crosscheck._sweep.engine import cpu_count, sweep


def _comparable(records: list[dict]) -> list[dict]:
    def strip(value):
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k not in ("seconds", "environment")}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    return strip(records)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dims", type=int, nargs="+", default=[8, 16])
    parser.add_argument("--seeds", type=int, default=4, help="seeds 0 .. N-1")
    parser.add_argument("--backends", nargs="+", default=["jax", "torch"])
    parser.add_argument("--jobs", type=int, default=cpu_count())
    parser.add_argument("--skip-dask", action="store_true")
    args = parser.parse_args()

    config = SweepConfig(
        {"dim": args.dims, "seeds": list(range(args.seeds)), "dtypes": ["float32", "float64"]}
    )
    todo = cases(config)
    console = Console(width=max(Console().width, 120))
    console.print(
        f"{len(todo)} cases: L=8 N=8 d in {args.dims}, seeds 0-{args.seeds - 1}, float32 and float64; "
        f"backends {', '.join(args.backends)} against numpy-fd; {cpu_count()} CPUs"
    )
    rows, baseline = [], None

    def timed(label: str, **engine) -> None:
        nonlocal baseline
        console.print(f"{label} ...", style="dim")
        start = time.perf_counter()
        result = sweep(todo, backends=args.backends, **engine)
        seconds = time.perf_counter() - start
        records = _comparable(result.records)
        baseline = records if baseline is None else baseline
        passed = sum(r["passed"] for r in result.records)
        rows.append((label, seconds, passed, records == baseline))

    timed("in process (jobs=0)", jobs=0)
    timed("1 worker process (jobs=1)", jobs=1)
    timed(f"{args.jobs} worker processes (jobs={args.jobs})", jobs=args.jobs)
    cluster_start = None
    if not args.skip_dask:
        import distributed

        start = time.perf_counter()
        with distributed.LocalCluster(
            n_workers=args.jobs, threads_per_worker=1, processes=True, dashboard_address=":0"
        ) as cluster:
            cluster_start = time.perf_counter() - start
            timed(f"dask LocalCluster, {args.jobs} workers", scheduler=cluster.scheduler_address)

    table = Table(title="crosscheck sweep: cases per second", title_justify="left")
    for column in ("how", "wall time", "cases/s", "vs in process", "passed", "records identical"):
        table.add_column(column, justify="left" if column == "how" else "right")
    first = rows[0][1]
    for label, seconds, passed, same in rows:
        table.add_row(
            label,
            f"{seconds:.1f} s",
            f"{len(todo) / seconds:.2f}",
            f"{first / seconds:.2f}x",
            f"{passed}/{len(todo)}",
            "yes" if same else "NO",
        )
    console.print(table)
    if cluster_start is not None:
        console.print(f"(starting the LocalCluster took {cluster_start:.1f} s more, not counted above)")


if __name__ == "__main__":
    main()
