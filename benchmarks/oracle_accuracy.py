"""What each evaluation of the model oracle buys: its error bars against exact gradients.

Run from the repository root: ``python benchmarks/oracle_accuracy.py [--seeds 10] [--sizes 1e3,1e4]``.

The models are the calibration's (``examples.no_reference.mlp``: LayerNorm, exact GELU, a projection
loss) and the ReLU MLP of ``examples/healthy.py`` (kinks everywhere). The exact gradient is PyTorch's
autograd in float64 (exact to float64 rounding); each loss is PyTorch's, differenced with its rounding
measured as the judge does (``2**-29 |loss32 - loss64|``). Per scheme, over every seed: the loss
evaluations per item (an entry, or a random direction of a tensor: 4 per tensor), the largest
``|estimate - exact| / error bar`` (**coverage: must stay below 1**), the median error bar relative to
the item's magnitude (``|value| + the model's scale``: what the unjudgeable rule and a candidate's
tolerance see), and the share of items unjudgeable. The schemes:

- ``scipy``: the oracle before issue 25, ``scipy.differentiate.derivative`` central, forward and
  backward (order 8, the step halved until two estimates agree);
- ``L steps``: Richardson's tableau over central differences at h, h/2, h/4 (and, with 4 steps, the
  window h/2 to h/8, which must agree with it), no refinement;
- ``L steps + refine``: refined one step at a time where the error bar is still large (the default:
  4 steps + refine);
- ``, h H``: the first step, as a fraction of each tensor's RMS (default ``oracle.entries.INITIAL_STEP``
  for an entry, ``oracle.directions.DIRECTION_STEP`` for a direction).

Before issue 38 a refined item was halved until its bar met the target or ``MAX_LEVELS``, even where the
rounding's share had already outgrown the bar (every later window's bar is larger: no estimate changes);
``, waste`` restores that, to count what the stop spares.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time

sys.path.insert(0, os.getcwd())

import numpy as np

from crosscheck._compare.constants import WIDEN
from crosscheck._workloads.model.oracle import directions as fd_directions
from crosscheck._workloads.model.oracle import entries as fd_entries
from crosscheck._workloads.model.oracle import stencil
from examples import healthy
from examples.no_reference import mlp

WIDTHS = {"1e3": (16, 32, 8), "1e4": (32, 96, 64, 8)}


def scipy_differentiate(evaluate, x0, h0, index, loss0, noise=0.0, float32=False, magnitude=None):
    """The oracle before issue 25 (``scipy.differentiate.derivative``, central and one-sided)."""
    from scipy.differentiate import derivative

    found = {}
    with np.errstate(all="ignore"):
        for side in (0, 1, -1):
            res = derivative(
                evaluate,
                x0,
                args=(index,),
                initial_step=h0,
                step_direction=side,
                maxiter=2 if float32 else 10,
            )
            h_final = h0 * 2.0 ** -np.maximum(res.nit, 1)
            level = max(stencil.EPS64 * abs(loss0), noise)
            found[side] = (res.df, 4.0 * np.nan_to_num(res.error, nan=np.inf) + 128.0 * level / h_final)
        (value, error), (fwd, e_f), (bwd, e_b) = found[0], found[1], found[-1]
        gap = np.abs(fwd - bwd)
        kink = ~(gap <= e_f + e_b)
    return value, error + np.where(kink, np.nan_to_num(gap, nan=np.inf), 0.0), kink


@contextlib.contextmanager
def scheme(name: str):
    """``scipy``, or ``L steps[ + refine][, h H]``: the stencil with ``LEVELS = L``, refined or not,
    first step ``H`` of each tensor's RMS."""
    saved = (
        stencil.LEVELS,
        stencil.MAX_LEVELS,
        fd_entries.INITIAL_STEP,
        fd_directions.DIRECTION_STEP,
        stencil._worth_halving,
        fd_entries.differentiate,
        fd_directions.differentiate,
    )
    try:
        if name == "scipy":  # as before issue 25
            fd_entries.INITIAL_STEP = fd_directions.DIRECTION_STEP = 0.25
            fd_entries.differentiate = fd_directions.differentiate = scipy_differentiate
        else:
            levels = int(name.split()[0])
            stencil.LEVELS = levels
            stencil.MAX_LEVELS = stencil.MAX_LEVELS if "refine" in name else levels
            if ", h " in name:
                first = float(name.split(", h ")[1].split(",")[0])
                fd_entries.INITIAL_STEP = fd_directions.DIRECTION_STEP = first
            if ", waste" in name:
                stencil._worth_halving = lambda error, last, rounding, float32=False: (
                    saved[4](error, last, rounding, True) if float32 else np.ones(np.shape(error), bool)
                )
        yield
    finally:
        (
            stencil.LEVELS,
            stencil.MAX_LEVELS,
            fd_entries.INITIAL_STEP,
            fd_directions.DIRECTION_STEP,
            stencil._worth_halving,
            fd_entries.differentiate,
            fd_directions.differentiate,
        ) = saved


def exact_gradient(workload, params, inputs) -> dict[str, np.ndarray]:
    import torch

    p = {k: torch.tensor(v, requires_grad=True) for k, v in params.items()}
    x = {k: torch.tensor(v) for k, v in inputs.items()}
    loss = workload.implementations["torch"](p, x)
    grads = torch.autograd.grad(loss, list(p.values()))
    return {k: g.numpy() for k, g in zip(p, grads, strict=True)}


def measure(workload, seed: int, mode: str) -> tuple[int, int, np.ndarray, np.ndarray, np.ndarray]:
    """Items, evaluations, and per item: |error| / bar, bar / magnitude, unjudgeable."""
    params, inputs = workload.make(seed=seed, dtype="float64")
    exact = exact_gradient(workload, params, inputs)
    fn = workload.implementations["torch"]
    import torch

    def loss(p, dtype=torch.float64):
        x = {k: torch.tensor(v, dtype=dtype) for k, v in inputs.items()}
        return float(fn({k: torch.tensor(v, dtype=dtype) for k, v in p.items()}, x))

    # The rounding of one evaluation, as the judge measures it (``oracle.sources.own_loss``).
    noise = WIDEN * abs(loss(params, torch.float32) - loss(params))
    if mode == "entries":
        est = fd_entries.estimate(loss, params, noise=noise)
        value = np.concatenate([est.value[k].ravel() for k in params])
        error = np.concatenate([est.error[k].ravel() for k in params])
        loose = np.concatenate([est.unjudgeable[k].ravel() for k in params])
        truth = np.concatenate([exact[k].ravel() for k in params])
        size = np.abs(value) + est.scale
    else:
        dirs = fd_directions.make_directions(params, 4)
        est = fd_directions.directional(loss, params, dirs, noise=noise)
        value, error, loose = est.value, est.error, est.unjudgeable
        truth = fd_directions.project(exact, dirs)
        size = np.abs(value) + est.scale * np.array([fd_directions.norm(d) for d in dirs])
    with np.errstate(all="ignore"):
        ratio = np.where(error > 0, np.abs(value - truth) / error, np.inf * (value != truth))
    return value.size, est.evaluations, ratio[~loose], (error / size)[~loose], loose


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--sizes", default="1e3,1e4")
    parser.add_argument(
        "--schemes",
        default=(
            "scipy;2 steps;3 steps;4 steps;4 steps + refine;4 steps + refine, waste;"
            "4 steps + refine, h 0.0625, waste;4 steps + refine, h 0.25"
        ),
    )
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    models = [(f"MLP {s}", mlp(WIDTHS[s], 8), "directions") for s in args.sizes.split(",")]
    models.insert(0, ("MLP 1e3", mlp(WIDTHS["1e3"], 8), "entries"))
    relu = next(w for w in healthy.WORKLOADS if w.name == "relu-mlp")
    models += [("ReLU MLP", relu, "entries"), ("ReLU MLP", relu, "directions")]
    print(f"# model oracle accuracy: {args.seeds} seeds, load {os.getloadavg()[0]:.1f}")
    print(
        "| model | items | scheme | evaluations / item | worst error / bar | median bar / magnitude | "
        "unjudgeable | s |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for label, workload, mode in models:
        for name in args.schemes.split(";"):
            start, items, count, ratios, bars, loose = time.perf_counter(), 0, 0, [], [], 0
            with scheme(name):
                for seed in range(args.seeds):
                    n, e, r, b, u = measure(workload, seed, mode)
                    items, count, loose = items + n, count + e, loose + int(u.sum())
                    ratios.append(r)
                    bars.append(b)
            r, b = np.concatenate(ratios), np.concatenate(bars)
            print(
                f"| {label} | {mode} | {name} | {count / items:.1f} | {np.max(r, initial=0):.3g} | "
                f"{np.median(b):.2g} | {loose} of {items} | {time.perf_counter() - start:.0f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
