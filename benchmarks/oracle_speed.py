"""The model oracle's cost beside a backend as reference, run as a user runs it: the command line.

Run from the repository root: ``python benchmarks/oracle_speed.py [--ports examples.port.convnet:port,...]``
or ``--case bert1e6,convnet`` (short names of ``CASES``).

Per port: the wall time of ``crosscheck run --workload PORT --quiet`` with the default reference (the
model oracle) and with ``--reference torch``, each in a fresh process with every core (as a user runs
it), the ratio, both exit statuses, the oracle's loss evaluations per function and its seconds (from
``--json``), and each run's CPU seconds (user + system of the child: what load changes least on a
shared machine).
Targets (issue 25): the default at most 3 x ``--reference torch``, the convnet in at most 30 s, a healthy
1e6-parameter BERT under 60 s and a 1e7 one under 5 minutes (``examples.port.bert_sizes``).
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

PORTS = (
    "examples.port.convnet:port",
    "examples.port.gpt2:port",
    "examples.port.deep:port",
    "examples.port.zoo:bert",
    "examples.port.zoo:llama",
    "examples.port.zoo:resnet",
)

#: Short names for ``--case``.
CASES = {
    "convnet": "examples.port.convnet:port",
    "gpt2": "examples.port.gpt2:port",
    "deep": "examples.port.deep:port",
    "bert": "examples.port.zoo:bert",
    "llama": "examples.port.zoo:llama",
    "resnet": "examples.port.zoo:resnet",
    "bert1e6": "examples.port.bert_sizes:bert1e6",
    "bert1e7": "examples.port.bert_sizes:bert1e7",
}


def _cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def run(port: str, reference: list[str]) -> tuple[float, float, int, dict]:
    """Seconds, CPU seconds, exit status and the JSON report's ``oracle`` section of one command-line
    run."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "report.json")
        argv = [sys.executable, "-m", "crosscheck", "run", "--workload", port, "--quiet", "--json", path]
        start, cpu = time.perf_counter(), _cpu()
        done = subprocess.run([*argv, *reference], capture_output=True, text=True, check=False)
        seconds, cpu = time.perf_counter() - start, _cpu() - cpu
        try:
            with open(path) as f:
                oracle = json.load(f).get("oracle", {})
        except (OSError, ValueError):
            oracle = {"error": done.stderr.strip().splitlines()[-1:] or done.stdout.strip().splitlines()[-1:]}
    return seconds, cpu, done.returncode, oracle


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ports", default=",".join(PORTS))
    parser.add_argument("--case", default="", help=f"short names instead of --ports: {', '.join(CASES)}")
    args = parser.parse_args()
    ports = [CASES[c] for c in args.case.split(",")] if args.case else args.ports.split(",")
    print(
        f"# model oracle speed: {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}, "
        f"{time.strftime('%Y-%m-%d %H:%M')}"
    )
    print(
        "| port | default s (CPU s) | exit | `--reference torch` s (CPU s) | exit | ratio "
        "| oracle evaluations | oracle s |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for port in ports:
        slow, slow_cpu, slow_rc, oracle = run(port, [])
        fast, fast_cpu, fast_rc, _ = run(port, ["--reference", "torch"])
        evaluations = ", ".join(f"{v}" for v in (oracle.get("evaluations") or {}).values()) or oracle.get(
            "error"
        )
        seconds = ", ".join(f"{v:.1f}" for v in (oracle.get("seconds") or {}).values())
        print(
            f"| `{port}` | {slow:.1f} ({slow_cpu:.1f}) | {slow_rc} | {fast:.1f} ({fast_cpu:.1f}) "
            f"| {fast_rc} | {slow / fast:.2f} | {evaluations} | {seconds} |",
            flush=True,
        )
    print(f"# load after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
