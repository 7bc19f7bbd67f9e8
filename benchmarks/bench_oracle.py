"""Time the finite-difference oracle against ``torch.autograd.gradcheck`` and against its own floor.

For each width d (N = 8, L = 8, the float64 gaussian case of ``crosscheck.make_inputs``) this times, in
one process:

* the oracle, ``load_backend("numpy-fd").estimate(weights, x)``: the best of ``--repeats`` runs;
* ``torch.autograd.gradcheck(fast_mode=False)`` in float64 on the same stack loss as a function of the
  weights: one call (it builds the full numerical Jacobian, two forward passes per weight);
* the oracle's *floor*: the matrix products the oracle cannot avoid, timed on this machine;

then the oracle alone at d = 64, N = 32 (float32 inputs; the oracle works in float64).

The floor. The oracle perturbs every weight ``W[k][i, j]`` by ``+h`` and ``-h`` and re-evaluates the
stack from layer ``k`` on, reusing the unperturbed prefix. The perturbation only moves column ``j`` of
``z[k]`` (no product needed there), and so only column ``j`` of ``y[k+1]``: ``z[k+1]`` changes by a
rank-one term (no product needed there either). Each of the two evaluations then costs ``L - 2 - k``
products ``(N, d) @ (d, d)`` (none for the last two layers). Summed over layers that is
``d*d * 2 * (L-1)*(L-2)/2`` such products. The oracle batches
them: a chunk of ``S`` entries (``_CHUNK_VALUES // (2*N*d)``, at most ``d*d``) stacks its ``2*S`` blocks
into one tall ``(2*S*N, d) @ (d, d)`` product. The floor is the best time of that one tall product
(written into a preallocated output, so no allocation is timed; sampled after each oracle run, so that
both see the same machine load) times the number of such products needed. Retries after a kink crossing
and all elementwise work are outside the floor.

Threads: BLAS and OpenMP run single-threaded unless ``OMP_NUM_THREADS`` / ``OPENBLAS_NUM_THREADS`` /
``MKL_NUM_THREADS`` are set by the caller (see below).

Usage: ``python benchmarks/bench_oracle.py [--dims 16 32 64] [--skip-gradcheck] [--skip-n32]``.
"""

from __future__ import annotations

import os

# One thread per library unless the caller set these: at these sizes extra BLAS / OpenMP threads mostly
# add wake-up latency, and on small VMs they make timings erratic (2 threads made torch's d=32 gradcheck
# 40x slower on a 2-vCPU VM). They must be set before numpy and torch load.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import argparse
import importlib
import time

import numpy as np
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

import crosscheck

LAYERS = 8
console = Console()


def inputs(dim: int, batch: int, dtype: str) -> tuple[np.ndarray, np.ndarray]:
    return crosscheck.make_inputs(crosscheck.Case(layers=LAYERS, batch=batch, dim=dim, dtype=dtype, seed=0))


def progress_bar(description: str) -> Progress:
    """A transient bar in a terminal; elsewhere (logs, CI) a plain line saying what runs."""
    if not console.is_terminal:
        console.print(f"{description} ...", style="dim")
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    return Progress(*columns, console=console, transient=True, disable=not console.is_terminal)


def floor_seconds(oracle: crosscheck.Backend, dim: int, batch: int, repeats: int = 30) -> float:
    """Time of the oracle's unavoidable matrix products, batched as the oracle batches them."""
    chunk_values = importlib.import_module(type(oracle).__module__)._CHUNK_VALUES
    entries = min(max(1, chunk_values // (2 * batch * dim)), dim * dim)  # S entries per chunk
    rows = 2 * entries * batch  # +h and -h: 2*S blocks of (N, d), stacked
    blocks = dim * dim * (LAYERS - 1) * (LAYERS - 2)  # sum over k of d*d * 2 * max(L - 2 - k, 0)
    rng = np.random.default_rng(0)
    a, w = rng.standard_normal((rows, dim)), rng.standard_normal((dim, dim))
    out = np.empty((rows, dim))
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        np.matmul(a, w, out=out)
        best = min(best, time.perf_counter() - start)
    return best * blocks * batch / rows


def time_oracle(weights: np.ndarray, x: np.ndarray, repeats: int) -> tuple[float, float, int]:
    """Best of ``repeats`` oracle runs, its floor (timed after each run, best kept), and its evaluations.

    Timing the floor between the oracle's runs samples both over the same stretch of time, so a noisy
    machine (a shared VM) moves them together and their ratio stays meaningful.
    """
    oracle, best, floor = crosscheck.load_backend("numpy-fd"), float("inf"), float("inf")
    d, n = weights.shape[1], x.shape[0]
    with progress_bar(f"oracle d={d} N={n}, best of {repeats}") as bar:
        for r in range(repeats):
            task = bar.add_task(f"oracle d={d} N={n} run {r + 1}/{repeats}", total=weights.size)
            start = time.perf_counter()
            est = oracle.estimate(weights, x, progress=lambda done, _, t=task: bar.update(t, completed=done))
            best = min(best, time.perf_counter() - start)
            floor = min(floor, floor_seconds(oracle, d, n))
    return best, floor, est.evaluations


def time_gradcheck(weights: np.ndarray, x: np.ndarray) -> tuple[float, bool]:
    """Wall time and verdict of one full-mode float64 ``torch.autograd.gradcheck`` call."""
    import torch

    w = torch.tensor(weights, dtype=torch.float64, requires_grad=True)
    xt = torch.tensor(x, dtype=torch.float64)
    calls, total = 0, 2 * weights.size  # two forward passes per weight dominate

    description = f"gradcheck d={weights.shape[1]}: {total} forward passes"
    with progress_bar(description) as bar:
        task = bar.add_task(description, total=total)

        def loss(w: torch.Tensor) -> torch.Tensor:
            nonlocal calls
            calls += 1
            if calls % 512 == 0:
                bar.update(task, completed=min(calls, total))
            y = xt
            for k in range(w.shape[0]):
                y = torch.relu(y @ w[k])
            return torch.sum(y**2)

        start = time.perf_counter()
        ok = torch.autograd.gradcheck(loss, (w,), fast_mode=False, raise_exception=False)
    return time.perf_counter() - start, ok


FOOTNOTE = (
    "floor: best time of one tall (2*S*N, d) @ (d, d) product (S = entries per oracle chunk) times the "
    "number of such products the oracle needs: d*d weights x 2 evaluations x (L-2-k) layers, summed over k. "
    "evals/2Ld²: the oracle's loss evaluations over the floor's (above 1: retries after crossing a kink). "
    "gradcheck: one fast_mode=False call; ✓/✗ is its verdict. Threads: OMP/OPENBLAS_NUM_THREADS, "
    f"here {os.environ['OPENBLAS_NUM_THREADS']}."
)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dims", type=int, nargs="+", default=[16, 32, 64], help="widths d (N=8, L=8)")
    parser.add_argument("--repeats", type=int, default=3, help="oracle runs per width (the best is kept)")
    parser.add_argument("--skip-gradcheck", action="store_true", help="time the oracle and its floor only")
    parser.add_argument("--skip-n32", action="store_true", help="skip the d=64, N=32 float32 oracle run")
    return parser.parse_args(argv)


def measure(args: argparse.Namespace) -> dict[int, dict]:
    rows = {}
    for d in args.dims:  # every oracle timing first, so that torch's thread pool cannot disturb them
        oracle, floor, evaluations = time_oracle(*inputs(d, 8, "float64"), args.repeats)
        rows[d] = {"oracle": oracle, "floor": floor, "evals": evaluations, "gc": None}
    if not args.skip_gradcheck:
        for d in args.dims:
            rows[d]["gc"], rows[d]["ok"] = time_gradcheck(*inputs(d, 8, "float64"))
    return rows


def ratio(a: float | None, b: float | None) -> str:
    return "-" if a is None or b is None else f"{a / b:.1f}x"


def seconds(t: float | None) -> str:
    return "-" if t is None else f"{t:.3f}"


def print_table(rows: dict[int, dict]) -> None:
    table = Table(title=f"oracle vs torch.autograd.gradcheck (gc), float64 gaussian, N=8, L={LAYERS}")
    for name in ("d", "oracle s", "gc s", "gc/oracle", "floor s", "oracle/floor", "evals/2Ld²"):
        table.add_column(name, justify="right")
    for d, r in rows.items():
        gc = seconds(r["gc"]) + ("" if r["gc"] is None else " ✓" if r["ok"] else " ✗")
        cells = (seconds(r["oracle"]), gc, ratio(r["gc"], r["oracle"]), seconds(r["floor"]))
        extra = (ratio(r["oracle"], r["floor"]), f"{r['evals'] / (2 * LAYERS * d * d):.2f}")
        table.add_row(str(d), *cells, *extra)
    console.print(table)
    console.print(FOOTNOTE, style="dim", highlight=False)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    print_table(measure(args))
    if not args.skip_n32:
        oracle, floor, evaluations = time_oracle(*inputs(64, 32, "float32"), args.repeats)
        console.print(
            f"oracle, d=64 N=32 L={LAYERS} float32 gaussian: [bold]{oracle:.3f} s[/bold] "
            f"(floor {floor:.3f} s, oracle/floor {oracle / floor:.1f}x, {evaluations} evaluations)"
        )


if __name__ == "__main__":
    main()
