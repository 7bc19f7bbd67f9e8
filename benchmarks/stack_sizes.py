"""The stack at real widths, as a user runs it: ``crosscheck run --dim D --batch 8`` (issue 38).

Run from the repository root: ``python benchmarks/stack_sizes.py [--dims 512 1024 ...] [--timeout S]``.

Per width: the wall time of the command in a fresh process (with every core), its CPU seconds (user +
system: what the other processes on a shared machine change least), its peak resident memory (from
``/usr/bin/time -v``), the memory estimate it prints before it starts (``size.estimate``, the same
arguments: two framework candidates), its exit status and verdict line, and the load average before it
started, and from its JSON report each candidate's share of unjudgeable entries and how many of its
ReLUs differ from float64's pattern where it was judged on its own (issue 57). Prints a Markdown table
(``docs/measurements/speed.md`` quotes one).

Targets (issue 38, not timed tests): ``--dim 2048`` under 30 s, ``--dim 4096`` under 3 minutes, the cost
growing with the flops (``d**2`` a layer for the oracle's float64 passes), and the estimate what the run
uses.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import subprocess
import sys
import tempfile

DIMS = (512, 1024, 1280, 1536, 2048, 4096)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def estimate_gib(dim: int) -> float:
    """What ``crosscheck run --dim DIM --batch 8`` estimates (jax and torch against the oracle)."""
    sys.path.insert(0, ROOT)
    from crosscheck._workloads.stack.size import estimate

    parts = estimate(layers=8, batch=8, dim=dim, dtype="float32", candidates=2, frameworks=2)
    return sum(parts.values()) / 2**30


def measure(dim: int, timeout: float) -> dict:
    load = os.getloadavg()[0]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, os.path.join(ROOT, "tests", "support")])}
    command = [sys.executable, "-m", "crosscheck", "run", "--dim", str(dim), "--batch", "8"]
    with (
        tempfile.NamedTemporaryFile("r", suffix=".txt") as timing,
        tempfile.NamedTemporaryFile("r", suffix=".json") as out,
    ):
        try:
            done = subprocess.run(
                ["/usr/bin/time", "-v", "-o", timing.name, *command, "--json", out.name],
                capture_output=True,
                text=True,
                env=env,
                cwd=ROOT,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired:
            return {"dim": dim, "load": load, "status": f"not done in {timeout:.0f} s"}
        report, found = timing.read(), out.read()
    field = lambda name: re.search(rf"{name}: (.*)", report).group(1)  # noqa: E731
    wall = field(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\)").split(":")
    seconds = sum(float(part) * 60**i for i, part in enumerate(reversed(wall)))
    lines = (done.stdout + done.stderr).strip().splitlines()
    verdict = next(
        (line for line in reversed(lines) if re.match(r"(PASSED|FAILED|crosscheck: error)", line)), ""
    )
    return {
        "dim": dim,
        "load": load,
        "status": done.returncode,
        "wall": seconds,
        "cpu": float(field("User time \\(seconds\\)")) + float(field("System time \\(seconds\\)")),
        "rss": int(field(r"Maximum resident set size \(kbytes\)")) * 1024 / 2**30,
        "verdict": verdict,
        "judged": _judged(json.loads(found)) if found else "",
    }


def _judged(report: dict) -> str:
    """Per candidate: its unjudgeable share, and the pattern it was judged on with its flipped ReLUs."""
    parts = []
    for c in report.get("comparisons", []):
        share = 100.0 * c.get("unjudgeable", 0) / max(c.get("total", 1), 1)
        coverage = c.get("coverage", "")
        flips = re.search(r"own ReLU pattern: (\d+) units", coverage)
        # A float32 built-in shows its activations: judged on its own pattern unless the coverage says
        # otherwise (no note: its pattern is float64's, no ReLU flipped).
        own = ", on float64's pattern" if "judged on float64's" in coverage else ", its own pattern"
        own += f" ({flips.group(1) if flips else 0} ReLUs flipped)"
        parts.append(f"{c['backend']} {share:.2f} %{own}")
    return "; ".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dims", type=int, nargs="+", default=list(DIMS))
    parser.add_argument("--timeout", type=float, default=900.0)
    args = parser.parse_args()
    print(f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, {os.cpu_count()} cores")
    print(
        "| d | wall | CPU (user + sys) | peak RSS | estimate printed | exit | load before | unjudgeable "
        "| verdict |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for dim in args.dims:
        row = measure(dim, args.timeout)
        estimate = f"{estimate_gib(dim):.2f} GiB"
        if "wall" not in row:
            print(f"| {dim} | {row['status']} | | | {estimate} | | {row['load']:.1f} | | |", flush=True)
            continue
        print(
            f"| {dim} | {row['wall']:.1f} s | {row['cpu']:.1f} s | {row['rss']:.2f} GiB | {estimate} | "
            f"{row['status']} | {row['load']:.1f} | {row['judged']} | {row['verdict'][:160]} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
