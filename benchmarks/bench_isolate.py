"""What ``--isolate`` costs: ``crosscheck run`` with and without it, per backend, at d = 16.

For each backend (jax, torch, numpy-fd as a candidate; the reference is always the in-process oracle)
this times the whole command, ``python -m crosscheck run --dim 16 --backend NAME [--isolate]`` (L = 8,
N = 8, float32, the default ``--repeat 2``), as a user sees it: interpreter start, imports, the run and
the report. Runs alternate between the two sides, so that both see the same machine load; the table
shows the median and the best of ``--repeats`` runs each, and the difference of the medians.

Isolation's cost is a second interpreter per backend (started while the oracle runs), its imports of
crosscheck and of the backend's framework in that process (which the parent then no longer imports),
and the arrays sent both ways (``.npy`` data over a socket). With several backends the workers start
side by side: ``--all`` also times the default run (every built-in) both ways.

Usage: ``python benchmarks/bench_isolate.py [--repeats 5] [--all]``. Quote the output with the machine,
its load (``uptime``) and the date.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time

from rich.console import Console
from rich.table import Table

BACKENDS = ("jax", "torch", "numpy-fd")
CASE = ["--layers", "8", "--batch", "8", "--dim", "16", "--quiet"]


def once(backends: list[str], isolate: bool) -> float:
    command = [sys.executable, "-m", "crosscheck", "run", *CASE]
    for name in backends:
        command += ["--backend", name]
    command += ["--isolate"] if isolate else ["--no-isolate"]
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} exited {done.returncode}:\n{done.stdout}{done.stderr}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--all", action="store_true", help="also the default run (every built-in)")
    args = parser.parse_args()
    console = Console()
    rows = [[name] for name in BACKENDS] + ([["jax", "torch"]] if args.all else [])
    table = Table(title=f"crosscheck run {' '.join(CASE)}: seconds, median (best) of {args.repeats}")
    for column in ("backends", "in process", "--isolate", "cost of --isolate"):
        table.add_column(column, justify="right")
    once(["numpy-fd"], False)  # warm the file cache
    for backends in rows:
        times: dict[bool, list[float]] = {False: [], True: []}
        for _ in range(args.repeats):
            for isolate in (False, True):
                times[isolate].append(once(backends, isolate))
        plain, isolated = (statistics.median(times[k]) for k in (False, True))
        table.add_row(
            " + ".join(backends),
            f"{plain:.2f} ({min(times[False]):.2f})",
            f"{isolated:.2f} ({min(times[True]):.2f})",
            f"{isolated - plain:+.2f}",
        )
    console.print(table)
    load = os.getloadavg() if hasattr(os, "getloadavg") else ()
    console.print(
        f"{platform.platform()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"load {' '.join(f'{x:.2f}' for x in load)}, {time.strftime('%Y-%m-%d %H:%M')}"
    )


if __name__ == "__main__":
    main()
