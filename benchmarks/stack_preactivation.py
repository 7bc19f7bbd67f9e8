"""Every entry of the stack's gradient from the layers' outputs (``oracle/preactivation.py``), beside the
entry-by-entry oracle and the screen that ``crosscheck run`` uses past its sizes.

Run from the repository root: ``python benchmarks/stack_preactivation.py [--dims 256 512 ...]
[--full-max 256] [--no-screen] [--timeout S]``.

Per width (L = N = 8, gaussian, float32 inputs, seed 0), each in a fresh process:

- the new oracle (``preactivation.estimate``): wall and CPU seconds, the process's resident peak at its
  end and its own estimate (``preactivation.memory``); then its error bars against the tolerance the
  judge gives a float32 candidate without them (the candidate's modelled float32 rounding and the
  floor: ``compare_full``'s other terms), median and largest ratio and the share above 0.1, with the
  largest difference from the float64 backward pass in units of bar (a bar far above 1 would be one
  that cannot cover);
- the entry-by-entry oracle (``load_backend("numpy-fd").estimate``) up to ``--full-max``;
- the screen: ``crosscheck run --dim D --batch 8`` (jax and torch against the screening oracle) under
  ``/usr/bin/time -v``, and the reference's own seconds from its JSON report.

A width is skipped, with its estimate, when its estimate is above what ``/proc/meminfo`` says is
available (less a GiB); the load average is printed before each step. Prints a Markdown table
(``docs/measurements/speed.md`` quotes one).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time

DIMS = (256, 512, 1024, 2048, 4096)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GIB = 2**30


def available() -> float:
    """Bytes of memory available now (``MemAvailable``), less a GiB of margin."""
    with open("/proc/meminfo") as f:
        kib = int(re.search(r"MemAvailable:\s+(\d+) kB", f.read()).group(1))
    return kib * 1024 - GIB


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def peak_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / GIB


def one(dim: int, what: str) -> dict:
    """Measure ``what`` (``new`` or ``full``) at ``dim``, in this process."""
    import numpy as np

    import crosscheck
    from crosscheck._workloads.stack.oracle import preactivation

    weights, x = crosscheck.make_inputs(crosscheck.Case(dim=dim, batch=8))
    before = peak_gib()
    start, cpu = time.perf_counter(), cpu_seconds()
    if what == "full":
        est = crosscheck.load_backend("numpy-fd").estimate(weights, x)
    else:
        est = preactivation.estimate(weights, x)
    row = {
        "wall": time.perf_counter() - start,
        "cpu": cpu_seconds() - cpu,
        "rss": peak_gib(),
        "rss_before": before,
        "evaluations": est.evaluations,
        "kinks": int(np.count_nonzero(est.kink)),
    }
    if what == "new":
        row["estimate"] = preactivation.memory(8, 8, dim) / GIB
        value, error = est.value, est.error
        del est  # its kink flags and places: 4 GiB at d = 4096
        row.update(bars(weights, x, value, error))
    return row


def bars(weights, x, value, error) -> dict:
    """The error bars against the judge's other terms for a float32 candidate, a layer at a time."""
    import numpy as np

    from crosscheck._compare import terms
    from crosscheck._compare.constants import UNIT_ROUNDOFF
    from crosscheck._workloads.stack import rounding
    from crosscheck._workloads.stack.forward import backward, forward

    fwd = forward(weights, x)
    deltas, _ = backward(fwd, grads=False)
    model = rounding.rounding_model(fwd, deltas, "float32")
    floor = terms.floor(terms.largest(value), UNIT_ROUNDOFF["float32"], ulps=terms.SAFETY_FLOOR_ULPS)
    medians, largest, above, off = [], 0.0, 0, 0.0
    for k in range(len(weights)):
        ratio = error[k] / (terms.modelled(model.grad_sigma[k]) + floor)
        medians.append(float(np.median(ratio)))
        largest, above = max(largest, float(ratio.max())), above + int(np.count_nonzero(ratio > 0.1))
        grad = fwd.ys[k].T @ deltas[k]  # the float64 backward pass (its rounding is ~1e-16 of it)
        off = max(off, float(np.max(np.abs(value[k] - grad) / np.maximum(error[k], 1e-300))))
    return {
        "median": float(np.median(medians)),
        "max": largest,
        "above": above / value.size,
        "backward_in_bars": off,
    }


def child(dim: int, what: str, timeout: float) -> dict:
    """``one`` in a fresh process (its resident peak its own)."""
    env = {**os.environ, "PYTHONPATH": ROOT}
    command = [sys.executable, __file__, "--one", str(dim), what]
    try:
        done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"status": f"not done in {timeout:.0f} s"}
    if done.returncode:
        return {"status": f"exit {done.returncode}: {done.stderr.strip().splitlines()[-1:]}"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def screen(dim: int, timeout: float) -> dict:
    """``crosscheck run --dim DIM --batch 8`` under ``/usr/bin/time -v``."""
    env = {**os.environ, "PYTHONPATH": ROOT}
    command = [sys.executable, "-m", "crosscheck", "run", "--dim", str(dim), "--batch", "8", "--quiet"]
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
            return {"status": f"not done in {timeout:.0f} s"}
        report, found = timing.read(), out.read()
    field = lambda name: re.search(rf"{name}: (.*)", report).group(1)  # noqa: E731
    wall = field(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\)").split(":")
    lines = (done.stdout + done.stderr).strip().splitlines()
    verdict = [line for line in lines if re.match(r"(PASSED|FAILED|crosscheck: error)", line)][-1:]
    reference = json.loads(found)["backends"]["numpy-fd"]["seconds"] if found else float("nan")
    return {
        "wall": sum(float(part) * 60**i for i, part in enumerate(reversed(wall))),
        "cpu": float(field("User time \\(seconds\\)")) + float(field("System time \\(seconds\\)")),
        "rss": int(field(r"Maximum resident set size \(kbytes\)")) * 1024 / GIB,
        "reference": reference,
        "verdict": verdict[0] if verdict else "",
        "exit": done.returncode,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dims", type=int, nargs="+", default=list(DIMS))
    parser.add_argument("--full-max", type=int, default=256, help="the widest the full oracle runs at")
    parser.add_argument("--no-screen", action="store_true", help="leave out `crosscheck run`")
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument("--one", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(int(args.one[0]), args.one[1])))
        return
    sys.path.insert(0, ROOT)
    from crosscheck._workloads.stack.oracle import preactivation

    print(f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, {os.cpu_count()} cores")
    for dim in args.dims:
        need = preactivation.memory(8, 8, dim)
        load = os.getloadavg()[0]
        if need > available():
            print(f"d = {dim}: skipped, needs about {need / GIB:.1f} GiB, {available() / GIB:.1f} available")
            continue
        row = {"dim": dim, "load": load, "new": child(dim, "new", args.timeout)}
        if dim <= args.full_max:
            row["load_full"] = os.getloadavg()[0]
            row["full"] = child(dim, "full", args.timeout)
        if not args.no_screen:
            row["load_screen"] = os.getloadavg()[0]
            row["screen"] = screen(dim, args.timeout)
        row["load_after"] = os.getloadavg()[0]
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
