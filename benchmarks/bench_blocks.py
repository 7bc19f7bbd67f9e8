"""What a blockwise check costs at real size: ``crosscheck blocks`` on Hugging Face GPT-2 small (124M
parameters, random weights, one sequence of 32 tokens: ``examples.port.gpt2_blocks:small``), its 12
``GPT2Block``s each checked as a port against ``FlaxGPT2Block``, one block at a time in one process.

For each reference (``torch``, and the default model oracle) this runs the command as a user does,
under ``/usr/bin/time -v``, and prints its exit status, the verdict line, the wall time and the peak
resident memory of the process (the recording's forward and backward pass of the whole PyTorch model
included, and the model itself, which the process keeps to take each block from).

Usage: ``python benchmarks/bench_blocks.py [--reference torch] [--workload SPEC]``, from the repository
root. Quote the output with the machine, its load (``uptime``) and the date.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys


def measure(workload: str, reference: str | None) -> dict[str, str]:
    """One ``crosscheck blocks`` run under ``/usr/bin/time -v``: its status, verdict, time and memory."""
    command = ["/usr/bin/time", "-v", sys.executable, "-m", "crosscheck", "blocks", "--workload", workload]
    if reference is not None:
        command += ["--reference", reference]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    verdict = next((line for line in done.stdout.splitlines() if line.startswith("verdict:")), "(none)")
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\S+)", done.stderr)
    peak = re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr)
    return {
        "reference": reference or "numpy-fd (default)",
        "status": str(done.returncode),
        "verdict": verdict[:100],
        "wall": wall.group(1) if wall else "?",
        "peak": f"{int(peak.group(1)) / 2**20:.1f} GiB" if peak else "?",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", default="examples.port.gpt2_blocks:small")
    parser.add_argument("--reference", action="append", help="torch, numpy-fd (default: both)")
    args = parser.parse_args()
    for reference in args.reference or ["torch", None]:
        row = measure(args.workload, reference)
        print(" | ".join(f"{k}: {v}" for k, v in row.items()), flush=True)


if __name__ == "__main__":
    main()
