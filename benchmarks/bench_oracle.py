"""Time the finite-difference oracle against ``torch.autograd.gradcheck`` and against its own floor.

For each width d (N = 8, L = 8, the float64 gaussian case of ``crosscheck.make_inputs``) this times, in
one process, with every core as a user runs them (no thread setting is changed here):

* the oracle, ``load_backend("numpy-fd").estimate(weights, x)``: the best of ``--repeats`` runs;
* ``torch.autograd.gradcheck(fast_mode=False)`` in float64 on the same stack loss as a function of the
  weights: the best of ``--gc-repeats`` calls (it builds the full numerical Jacobian, two forward passes
  per weight);
* the oracle's *floor*: the matrix products the oracle cannot avoid, timed on this machine;

then the HVP oracle (``hvp_estimate``, full, and ``hvp_screen``) at ``--hvp-dim`` (default 64).

The floors. The oracle perturbs every weight ``W[k][i, j]`` by ``+h`` and ``-h`` and re-evaluates the
stack from layer ``k`` on, reusing the unperturbed prefix and only the rows of the batch the
perturbation changes: row n changes when ``y[k][n, i] != 0`` and unit ``(k, n, j)`` is on. In such a
row only ``z[k][n, j]`` moves (no product), so ``z[k+1][n]`` changes by a rank-one term (no product
either); each of the two evaluations then costs ``L - 2 - k`` row products. A unit that is off at the
base point contributes an exact zero to the next product, so the oracle multiplies only the units that
are on: layer m's row product is ``(1, on) @ (on, d)``, ``on`` the units of ``y[m][n]`` that are on.

* ``floor``: the flops of exactly those products (the changed rows, the units that are on), at the best
  rate of this machine's BLAS on tall products of the oracle's block size with ``d / 2`` inner
  columns: all cores in BLAS's threads, or one single-threaded BLAS per core in parallel threads.
* ``all-rows floor``: the floor as this benchmark first defined it (when the speed issue was filed):
  every row of the batch in every evaluation, full ``(N, d) @ (d, d)`` products, at the best rate of
  full-width tall products.

Retries after a kink crossing and all elementwise work (ReLU, mask checks, the rounding model) are
outside both. The floors are sampled after each timed oracle run, so that both see the same machine
load, and each timed run follows an untimed one (so that it does not start from the caches and clocks
the floor's products left).

Usage: ``python benchmarks/bench_oracle.py [--dims 16 32 64] [--skip-gradcheck] [--hvp-dim 64]
[--profile]``.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import threading
import time

import numpy as np
from rich.console import Console
from rich.table import Table

import crosscheck
from crosscheck._workloads.stack.forward import forward
from crosscheck._workloads.stack.judge.directions import sign_directions
from crosscheck._workloads.stack.oracle import perturb, threads
from crosscheck._workloads.stack.oracle.hvp import direction

LAYERS = 8
console = Console(width=150)


def inputs(dim: int, batch: int, dtype: str = "float64") -> tuple[np.ndarray, np.ndarray]:
    return crosscheck.make_inputs(crosscheck.Case(layers=LAYERS, batch=batch, dim=dim, dtype=dtype, seed=0))


def floor_flops(weights: np.ndarray, x: np.ndarray) -> tuple[float, float]:
    """The flops of the floor and of the all-rows floor on this case (see the module doc)."""
    fwd = forward(weights, x)
    batch, d = x.shape[0], weights.shape[1]
    on = [np.count_nonzero(mask, axis=1) for mask in fwd.masks]  # per layer, per batch row
    own, every = 0.0, 0.0
    for k in range(LAYERS - 2):
        changed = np.count_nonzero(fwd.ys[k], axis=1) * on[k]  # per batch row: the entries moving it
        later = sum(on[m - 1] for m in range(k + 2, LAYERS))  # units on, in the products it needs
        own += float(np.sum(2 * changed * 2 * later * d))
        every += 2 * d * d * (LAYERS - 2 - k) * batch * 2 * d * d
    return own, every


def _best_product(a: np.ndarray, w: np.ndarray, out: np.ndarray, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        np.matmul(a, w, out=out)
        best = min(best, time.perf_counter() - start)
    return best


def seconds_per_flop(dim: int, inner: int, repeats: int = 20) -> float:
    """The best time per flop of tall ``(rows, inner) @ (inner, dim)`` products of the oracle's block
    size, on all cores: BLAS's own threads, or one single-threaded BLAS per core in parallel."""
    rows = perturb.block_rows(dim)
    flops = 2.0 * rows * inner * dim
    rng = np.random.default_rng(0)
    w = rng.standard_normal((inner, dim))
    blocks = [(rng.standard_normal((rows, inner)), np.empty((rows, dim))) for _ in range(threads.workers())]
    one = _best_product(blocks[0][0], w, blocks[0][1], repeats) / flops  # BLAS's own threads
    times = [0.0] * len(blocks)

    def worker(i: int) -> None:
        times[i] = _best_product(blocks[i][0], w, blocks[i][1], repeats)

    with threads.single_threaded_blas():
        pool = [threading.Thread(target=worker, args=(i,)) for i in range(len(blocks))]
        for t in pool:
            t.start()
        for t in pool:
            t.join()
    parallel = max(times) / (flops * len(blocks))  # one block per core at once
    return min(one, parallel)


def time_oracle(weights: np.ndarray, x: np.ndarray, repeats: int) -> dict:
    """Best of ``repeats`` oracle runs, its floors (sampled after each run, best kept), its evaluations."""
    oracle, best = crosscheck.load_backend("numpy-fd"), float("inf")
    d = weights.shape[1]
    own_rate, full_rate = float("inf"), float("inf")
    console.print(f"oracle d={d} N={x.shape[0]}, best of {repeats} ...", style="dim")
    for _ in range(repeats):
        # Each timed run follows an untimed one: the floor's products just before (both cores, other
        # data) slowed the next run by about 7 ms at d = 64 (112 against 105 ms, best of 7).
        oracle.estimate(weights, x)
        start = time.perf_counter()
        est = oracle.estimate(weights, x)
        best = min(best, time.perf_counter() - start)
        own_rate = min(own_rate, seconds_per_flop(d, max(1, d // 2)))
        full_rate = min(full_rate, seconds_per_flop(d, d))
    own, every = floor_flops(weights, x)
    return {"oracle": best, "floor": own * own_rate, "all": every * full_rate, "evals": est.evaluations}


def time_gradcheck(weights: np.ndarray, x: np.ndarray) -> tuple[float, bool]:
    """Wall time and verdict of one full-mode float64 ``torch.autograd.gradcheck`` call."""
    import torch

    w = torch.tensor(weights, dtype=torch.float64, requires_grad=True)
    xt = torch.tensor(x, dtype=torch.float64)

    def loss(w: torch.Tensor) -> torch.Tensor:
        y = xt
        for k in range(w.shape[0]):
            y = torch.relu(y @ w[k])
        return torch.sum(y**2)

    console.print(f"gradcheck d={weights.shape[1]}: {2 * weights.size} forward passes ...", style="dim")
    start = time.perf_counter()
    ok = torch.autograd.gradcheck(loss, (w,), fast_mode=False, raise_exception=False)
    return time.perf_counter() - start, ok


def ratio(a: float | None, b: float | None) -> str:
    return "-" if a is None or b is None else f"{a / b:.1f}x"


def print_table(rows: dict[int, dict]) -> None:
    table = Table(title=f"oracle vs torch.autograd.gradcheck (gc), float64 gaussian, N=8, L={LAYERS}")
    names = ("d", "oracle s", "gc s", "gc/oracle", "floor s", "oracle/floor", "all-rows floor s")
    for name in (*names, "oracle/all-rows", "evals/2Ld²"):
        table.add_column(name, justify="right")
    for d, r in rows.items():
        gc = "-" if r["gc"] is None else f"{r['gc']:.3f} " + ("✓" if r["ok"] else "✗")
        cells = (f"{r['oracle']:.3f}", gc, ratio(r["gc"], r["oracle"]), f"{r['floor']:.4f}")
        extra = (ratio(r["oracle"], r["floor"]), f"{r['all']:.4f}", ratio(r["oracle"], r["all"]))
        table.add_row(str(d), *cells, *extra, f"{r['evals'] / (2 * LAYERS * d * d):.2f}")
    console.print(table)
    console.print(
        "floor: the products of the rows each perturbation changes, the units that are on only (L-2-k "
        "per evaluation, 2 per weight); all-rows floor: every row, full products (the first definition). "
        "Both at the best rate of this machine's BLAS on all cores (its threads, or one single-threaded "
        "BLAS per core). evals/2Ld²: loss evaluations over 2 per weight (above 1: retries after a kink). "
        f"Cores: {threads.workers()}; OMP/OPENBLAS_NUM_THREADS: "
        f"{os.environ.get('OMP_NUM_THREADS')}/{os.environ.get('OPENBLAS_NUM_THREADS')}.",
        style="dim",
        highlight=False,
    )


def time_hvp(dim: int, directions: int) -> None:
    weights, x = inputs(dim, 8, "float32")
    v, oracle = direction(weights, 0), crosscheck.load_backend("numpy-fd")
    start = time.perf_counter()
    full = oracle.hvp_estimate(weights, x, v)
    full_s = time.perf_counter() - start
    start = time.perf_counter()
    screened = oracle.hvp_screen(weights, x, v, sign_directions(LAYERS, directions, dim))
    screen_s = time.perf_counter() - start
    console.print(
        f"HVP oracle, d={dim} N=8 L={LAYERS} float32 gaussian: full [bold]{full_s:.2f} s[/bold] "
        f"({full.evaluations} evaluations), screened along {directions} directions per layer "
        f"[bold]{screen_s:.2f} s[/bold] ({screened.evaluations} evaluations)"
    )


def profile(weights: np.ndarray, x: np.ndarray) -> None:
    """Where the oracle's time goes: the top functions by own time."""
    oracle = crosscheck.load_backend("numpy-fd")
    profiler = cProfile.Profile()
    profiler.enable()
    oracle.estimate(weights, x)
    profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(12)
    console.print(out.getvalue(), highlight=False, markup=False)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dims", type=int, nargs="+", default=[16, 32, 64], help="widths d (N=8, L=8)")
    parser.add_argument("--repeats", type=int, default=3, help="oracle runs per width (the best is kept)")
    parser.add_argument("--skip-gradcheck", action="store_true", help="time the oracle and its floor only")
    parser.add_argument(
        "--gc-repeats", type=int, default=1, help="gradcheck calls per width (the best is kept)"
    )
    parser.add_argument("--hvp-dim", type=int, default=64, help="width of the HVP timing (0: skip it)")
    parser.add_argument("--directions", type=int, default=4, help="directions per layer, HVP screening")
    parser.add_argument("--profile", action="store_true", help="profile the oracle at the largest width")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    rows = {}
    for d in args.dims:  # every oracle timing first: torch's threads, once started, spin a while
        rows[d] = {**time_oracle(*inputs(d, 8), args.repeats), "gc": None, "ok": None}
    if not args.skip_gradcheck:
        for d in args.dims:
            runs = [time_gradcheck(*inputs(d, 8)) for _ in range(args.gc_repeats)]
            rows[d]["gc"], rows[d]["ok"] = min(t for t, _ in runs), all(ok for _, ok in runs)
    print_table(rows)
    if args.hvp_dim:
        time_hvp(args.hvp_dim, args.directions)
    if args.profile:
        profile(*inputs(max(args.dims), 8))


if __name__ == "__main__":
    main()
