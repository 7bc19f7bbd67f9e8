"""What the backward localisation by cotangents costs a port check.

A port whose forward agrees and whose gradient differs has both sides' cotangents captured (each
module's output and input gradients: PyTorch's at the case's dtype and in the other, the port's at the
case's dtype, compiled) before its verdict; a healthy port, or one whose forward differs, never has
them. This times ``crosscheck.run`` on each example with the captures made and with them turned off
(the verdict by parameters' gradients alone), alternating, ``--repeats`` times each, and prints the
median wall seconds and their ratio (a check made again: its CPU seconds too, which others' work on
the machine does not inflate), twice: a first check in a new process (``first``: its
compilations included, its imports not), and a check made again in one process, as in a notebook,
after one untimed check, where each side's compiled programs are kept (``Kept``) and only tracing is
paid again; with ``--against DIR``, first ``crosscheck run`` as a user runs it (a new process, imports
included), of this code and of the code in DIR (before the cotangents: its ``crosscheck`` and
``backends``, with this checkout's ports). Run from the repository root::

    python benchmarks/backward_cost.py
    python benchmarks/backward_cost.py --ports examples.port.custom_op:wrong_sign --repeats 5
    python benchmarks/backward_cost.py --against /tmp/before     # the code before: see --against
    python benchmarks/backward_cost.py --ports wide:missing_term --only again

``wide:NAME`` is the custom op example's ``NAME`` at 2.1 million parameters (``wide_port.py``: widths
512, 2048, 512; 8 sequences of 128 tokens), where the comparisons' cost shows.

The cotangents are turned off by replacing ``backward.chains`` with one that captures nothing, which
is what a check without them computes. Each port is run in the process that replaced it (an object,
not a spec string, which a contained run would load in a worker, where the replacement does not reach).
"""

from __future__ import annotations

import argparse
import importlib
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root

ROOT = str(Path(__file__).resolve().parents[1])
PORTS = ("examples.port.custom_op:port", "examples.port.custom_op:missing_term")
#: The CPU seconds of each ``timed`` check (every thread of this process): on a machine others share,
#: wall seconds count their work too.
CPU: list[float] = []


def port_of(spec: str) -> object:
    """The port a spec names: ``module:name``, or ``wide:NAME`` (``wide_port``: this process's custom op
    example made wide)."""
    module, _, name = spec.partition(":")
    return getattr(importlib.import_module("wide_port" if module == "wide" else module), name)


def timed(port: object, reference: str, *, cotangents: bool) -> tuple[float, str]:
    """One check's wall seconds and its verdict's first words, with or without the cotangents."""
    import crosscheck
    from crosscheck._workloads.port.judge import backward

    original = backward.chains
    if not cotangents:
        backward.chains = lambda *args, **kwargs: backward.Chains(problem="turned off")  # type: ignore[assignment]
    try:
        start, cpu = time.perf_counter(), time.process_time()
        report = crosscheck.run(workload=port, backends=["jax"], reference=reference)
        seconds = time.perf_counter() - start
        CPU.append(time.process_time() - cpu)
    finally:
        backward.chains = original  # type: ignore[assignment]
    verdict = report.backends["jax"].notes.get("port", {})
    return seconds, f"{'PASSED' if report.passed else 'FAILED'} at {verdict.get('module')}"


def first(spec: str, reference: str, *, cotangents: bool) -> tuple[float, str]:
    """A first check in a new process (its compilations included, its imports not): its wall seconds."""
    code = (
        "import importlib, sys; sys.path.insert(0, sys.argv[1]); import backward_cost as b; "
        "port = b.port_of(sys.argv[2]); "
        "t, said = b.timed(port, sys.argv[3], cotangents=sys.argv[4] == 'on'); "
        "print(t, said, sep='|')"
    )
    here = str(Path(__file__).resolve().parent)
    argv = [sys.executable, "-c", code, here, spec, reference, "on" if cotangents else "off"]
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1]
    took, said = out.split("|", 1)
    return float(took), said


def cli(spec: str, reference: str, root: str) -> float:
    """``crosscheck run`` as a user runs it (a new process, imports included), of the code under
    ``root``: its wall seconds."""
    # the ports from this checkout (``wide:NAME``: ``wide_port``'s, in this folder)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join((root, ROOT, str(Path(__file__).resolve().parent)))}
    spec = spec.replace("wide:", "wide_port:", 1) if spec.startswith("wide:") else spec
    argv = [
        sys.executable,
        "-m",
        "crosscheck",
        "run",
        "--workload",
        spec,
        "--reference",
        reference,
        "--quiet",
    ]
    start = time.perf_counter()
    subprocess.run(argv, env=env, cwd=root, capture_output=True, check=False)  # `-m` imports from its cwd
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ports", nargs="+", default=list(PORTS))
    parser.add_argument("--reference", default="torch")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--only", choices=("first", "again"), help="time only a first check, or only one made again"
    )
    parser.add_argument(
        "--against",
        help="a copy of the code before the cotangents (`git archive <commit> crosscheck backends | tar -x "
        "-C DIR`; the ports are this checkout's): also time `crosscheck run` of each port under both, as "
        "a user runs it",
    )
    args = parser.parse_args()
    print(f"{platform.node()} {platform.processor() or platform.machine()}, {os.cpu_count()} cores")
    print(f"load at start: {os.getloadavg()[0]:.1f}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    for spec in args.ports if args.against else ():
        runs: dict[str, list[float]] = {args.against: [], ROOT: []}
        for _ in range(args.repeats):
            for root in runs:
                runs[root].append(cli(spec, args.reference, root))
        off, on = statistics.median(runs[args.against]), statistics.median(runs[ROOT])
        print(f"{spec}, `crosscheck run`: before {off:.2f} s, with {on:.2f} s: x {on / off:.3f}")
    for spec in args.ports if args.only != "again" else ():
        news: dict[bool, list[float]] = {True: [], False: []}
        for _ in range(args.repeats):
            for on in (False, True):
                news[on].append(first(spec, args.reference, cotangents=on)[0])
        off, on = statistics.median(news[False]), statistics.median(news[True])
        print(
            f"{spec}, a first check in a new process: without {off:.2f} s, with {on:.2f} s: x {on / off:.3f}"
        )
    for spec in args.ports if args.only != "first" else ():
        port = port_of(spec)  # an object: run here, where the patch is
        for on in (False, True):  # imports and first compilations, as in a notebook's first check: not timed
            timed(port, args.reference, cotangents=on)
        seconds: dict[bool, list[float]] = {True: [], False: []}
        cpus: dict[bool, list[float]] = {True: [], False: []}
        said = {}
        for _ in range(args.repeats):
            for on in (False, True):
                took, said[on] = timed(port, args.reference, cotangents=on)
                seconds[on].append(took)
                cpus[on].append(CPU[-1])
        off, on = statistics.median(seconds[False]), statistics.median(seconds[True])
        c_off, c_on = statistics.median(cpus[False]), statistics.median(cpus[True])
        print(
            f"{spec} --reference {args.reference}, checked again: without {off:.2f} s ({said[False]}), "
            f"with {on:.2f} s ({said[True]}): x {on / off:.3f}; CPU seconds {c_off:.2f} and {c_on:.2f}: "
            f"x {c_on / c_off:.3f}"
        )
    print(f"load at end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
