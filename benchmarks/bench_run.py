"""Time ``crosscheck run`` end to end, as a user runs it, with where the time goes.

Each command runs as a user runs it, ``python -m crosscheck run ...`` in a fresh subprocess (all cores;
no thread setting is changed here), ``--repeats`` times; the best wall time is kept. Where the time goes,
from two more subprocesses per repeat (best kept):

* ``imports``: every top-level import a run makes, JAX's and PyTorch's included (they load when a backend
  first runs; PyTorch's checkpoint imports ``torch._dynamo`` on its first call), summed from
  ``python -X importtime`` (its own overhead included: a few percent);
* ``work``: ``crosscheck``'s ``main`` in a process that imported everything first (JAX, PyTorch with
  ``torch._dynamo``, the adapters): the run without its imports, split into ``reference`` (the oracle's
  guarded call), ``candidates`` (every candidate's guarded calls, JAX's compilation included) and
  ``judge`` (the rest: rounding models, kinks, comparing, the report and its rendering).

``wall`` is about the interpreter's start (~0.03 s) plus ``imports`` plus ``work``. ``cpu`` is the plain
run's CPU time (user + system, every thread): on a shared machine it says what the run costs whatever
the others do (on an idle one, the wall time is below it when the run's threads overlap).

Usage: ``python benchmarks/bench_run.py [--repeats 2] [--only 512]`` (``--only`` keeps the commands
whose arguments contain the given text).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

COMMANDS = [
    ["--dim", "4"],
    ["--dim", "64"],
    ["--dim", "512", "--batch", "8"],
    ["--dim", "1024", "--batch", "8"],
    ["--quantity", "hvp", "--dim", "64", "--oracle-mode", "full"],
    ["--quantity", "hvp", "--dim", "64", "--oracle-mode", "screen"],
    ["--quantity", "hvp", "--dim", "512", "--batch", "8"],
]
console = Console(width=150)


def import_seconds(stderr: str) -> float:
    """The summed cumulative time of the top-level entries of ``-X importtime``'s report."""
    total = 0
    for line in stderr.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        _, cumulative, name = line.split("|", 2)
        if cumulative.strip().isdigit() and not name[1:].startswith(" "):  # top level: one space
            total += int(cumulative)
    return total / 1e6


#: ``main`` timed in a process that imported everything first; prints its seconds last.
PREIMPORTED = """
import sys, time
import jax, jax.numpy, torch, torch._dynamo
import crosscheck._cli.main as cli
from crosscheck._backends import load_backend
for name in ("jax", "torch", "numpy-fd"):
    load_backend(name)
start = time.perf_counter()
code = cli.main(sys.argv[1:])
print(f"\\nWORK {time.perf_counter() - start}")
"""


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _subprocess(
    command: list[str], arguments: list[str]
) -> tuple[float, float, subprocess.CompletedProcess, dict]:
    with tempfile.TemporaryDirectory() as folder:
        report = Path(folder) / "report.json"
        start, cpu = time.perf_counter(), _cpu()
        done = subprocess.run([*command, *arguments, "--json", str(report)], capture_output=True, text=True)
        wall, cpu = time.perf_counter() - start, _cpu() - cpu
        if done.returncode not in (0, 1):
            raise SystemExit(f"{' '.join(arguments)} exited {done.returncode}: {done.stderr[-2000:]}")
        return wall, cpu, done, json.loads(report.read_text())


def run_once(arguments: list[str]) -> dict:
    run = ["run", *arguments]
    wall, cpu, _, record = _subprocess([sys.executable, "-m", "crosscheck"], run)
    *_, timed, _ = _subprocess([sys.executable, "-X", "importtime", "-m", "crosscheck"], run)
    *_, inside, preimported = _subprocess([sys.executable, "-c", PREIMPORTED], run)
    work = float(inside.stdout.rsplit("WORK", 1)[1])
    backends = preimported["backends"]
    reference = sum(b.get("seconds") or 0.0 for b in backends.values() if b.get("role") == "reference")
    candidates = sum(b.get("seconds") or 0.0 for b in backends.values() if b.get("role") != "reference")
    return {
        "wall": wall,
        "cpu": cpu,
        "imports": import_seconds(timed.stderr),
        "work": work,
        "reference": reference,
        "candidates": candidates,
        "judge": work - reference - candidates,
        "passed": record["passed"],
        "coverage": ", ".join(sorted({c.get("coverage", "")[:9] for c in record["comparisons"]})),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2, help="runs per command (the fastest is kept)")
    parser.add_argument("--only", default="", help="only the commands whose arguments contain this")
    args = parser.parse_args(argv)
    table = Table(title="crosscheck run, end to end (seconds, each column the best of the runs)")
    columns = ("wall", "cpu", "imports", "work", "reference", "candidates", "judge")
    for name in ("arguments", *columns, "passed", "mode"):
        table.add_column(name, justify="left" if name == "arguments" else "right")
    for arguments in COMMANDS:
        if args.only not in " ".join(arguments):
            continue
        console.print(f"crosscheck run {' '.join(arguments)} ...", style="dim")
        runs = [run_once(arguments) for _ in range(args.repeats)]
        best = {k: min(r[k] for r in runs) for k in columns}
        cells = [f"{best[k]:.2f}" for k in columns]
        table.add_row(" ".join(arguments), *cells, str(runs[0]["passed"]), runs[0]["coverage"])
    console.print(table)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    console.print(f"cores: {os.cpu_count()}; load average (1 min) at the end: {load:.2f}", style="dim")


if __name__ == "__main__":
    main()
