"""Training-step parity on the GPT-2 port (``examples.port.gpt2:train``): the healthy pair over seeds
(no false alarm?), and, for each planted bug, the step at which crosscheck's ``update`` check sees it
against the step at which a loss-curve comparison at 1e-3 does.

Run from the repository root::

    python benchmarks/train.py --seeds 10                 # healthy, seeds 0-9, 20 steps each
    python benchmarks/train.py --bugs --curve-steps 200   # the side-by-side table

Each crosscheck run is a subprocess through the command line with ``--json``, as a user runs it. The
loss curves are computed here: each side trains ``--curve-steps`` steps in float32 from the same start
(the same factories as the check), and the curve comparison flags the first step whose losses differ
by more than 1e-3 relative (``|L_torch - L_jax| > 1e-3 |L_torch|``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from examples.port.optimizers import BUGS, SCHEDULE_BUGS, STATE_BUGS  # noqa: E402  (imports no framework)

CURVE_RTOL = 1e-3


def check(name: str, *, seed: int, steps: int) -> dict:
    """One ``crosscheck run --quantity update`` of ``examples.port.gpt2:<name>``: what it found."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "report.json"
        argv = [sys.executable, "-m", "crosscheck", "run", "--workload", f"examples.port.gpt2:{name}"]
        argv += ["--quantity", "update", "--steps", str(steps), "--seed", str(seed), "--json", str(out)]
        start = time.perf_counter()
        done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, env=_env(), check=False)
        seconds = time.perf_counter() - start
        if not out.exists():
            return {"exit": done.returncode, "error": done.stderr.strip()[-300:], "seconds": seconds}
        report = json.loads(out.read_text())
    ratios = [c["worst_ratio"] for c in report["comparisons"] if c.get("worst_ratio") is not None]
    update = report["backends"].get("jax", {}).get("notes", {}).get("update", {})
    worst = max(ratios, default=None)
    return {
        "exit": done.returncode,
        "passed": report["passed"],
        "worst_ratio": worst,
        "update": update,
        "seconds": seconds,
    }


def earlier(folder: str, bug: str) -> dict:
    """What an earlier ``crosscheck run --json`` report of the case found (``check``'s keys)."""
    path = Path(folder) / f"{bug or 'healthy'}.json"
    if not path.exists():
        return {"update": {"first_step": None, "part": f"no report {path.name}"}}
    report = json.loads(path.read_text())
    return {"passed": report["passed"], "update": report["backends"]["jax"]["notes"].get("update", {})}


def loss_curve_step(name: str, steps: int) -> tuple[int | None, float]:
    """The first step at which the two sides' float32 losses differ by more than ``CURVE_RTOL``
    relative (None: never within ``steps``), and the largest relative difference seen."""
    import numpy as np

    import examples.port.gpt2 as gpt2
    from crosscheck._workloads.port.declare.build import jax_implementation, torch_implementation
    from crosscheck._workloads.train import jax_steps, torch_steps

    train = getattr(gpt2, name)
    prepared = train.port.prepared
    params, inputs = prepared.workload.make(seed=0, dtype="float32")
    sides = {}
    for side, module, factory, loss in (
        ("torch", torch_steps, train.torch_optimizer, _torch_loss(torch_implementation(prepared))),
        ("jax", jax_steps, train.optax, _jax_loss(jax_implementation(prepared))),
    ):
        rows = module.trajectory(prepared, factory, train.hyper, params, inputs, steps)
        rows = {k: v for k, v in rows.items() if k in prepared.parameters}  # the start state left out
        sides[side] = [loss({k: v[t] for k, v in rows.items()}, inputs) for t in range(steps + 1)]
    a, b = np.array(sides["torch"]), np.array(sides["jax"])
    rel = np.abs(a - b) / np.abs(a)
    over = np.nonzero(rel > CURVE_RTOL)[0]
    return (int(over[0]) if over.size else None), float(rel.max())


def _torch_loss(fn):
    import torch

    def loss(params, inputs):
        with torch.no_grad():
            tensors = {k: torch.as_tensor(v) for k, v in {**params, **inputs}.items()}
            return float(fn({k: tensors[k] for k in params}, {k: tensors[k] for k in inputs}))

    return loss


def _jax_loss(fn):
    import jax.numpy as jnp

    return lambda params, inputs: float(
        fn({k: jnp.asarray(v) for k, v in params.items()}, {k: jnp.asarray(v) for k, v in inputs.items()})
    )


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=0, help="healthy runs, seeds 0..N-1")
    parser.add_argument("--steps", type=int, default=20, help="optimizer steps of each check")
    parser.add_argument("--bugs", action="store_true", help="the side-by-side table of the planted bugs")
    parser.add_argument("--curve-steps", type=int, default=200, help="steps of the loss curves")
    parser.add_argument(
        "--reports",
        metavar="DIR",
        help="with --bugs: take crosscheck's findings from DIR/<bug>.json (DIR/healthy.json), reports of "
        "earlier `crosscheck run --json` runs of the same cases, instead of running them again",
    )
    parser.add_argument("--only", action="append", metavar="BUG", help="with --bugs: only these (repeatable)")
    args = parser.parse_args()
    print(f"# {platform.node()} {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}, {time.ctime()}")
    for seed in range(args.seeds):
        found = check("train", seed=seed, steps=args.steps)
        said = f"exit {found['exit']}, worst ratio {found.get('worst_ratio')}, {found['seconds']:.0f} s"
        print(f"healthy seed {seed}: {said} {found.get('error', '')}", flush=True)
    if args.bugs:
        print("| case | crosscheck: first step, part | loss curve at 1e-3: first step | largest difference |")
        print("|---|---|---|---|")
        for bug in args.only or ["", *BUGS, *STATE_BUGS, *SCHEDULE_BUGS]:
            bug = "" if bug == "healthy" else bug
            name = f"train_{bug}" if bug else "train"
            found = earlier(args.reports, bug) if args.reports else check(name, seed=0, steps=args.steps)
            update = found.get("update", {})
            step, part = update.get("first_step"), update.get("part")
            seen = f"{step}, {part}" if step else part or "passes"
            if update.get("state"):  # the optimizers started apart: named before any step
                seen = f"0 (the start), the optimizer state ({update['state']['kind']})"
            curve, largest = loss_curve_step(name, args.curve_steps)
            when = f"{curve if curve is not None else 'never'} (of {args.curve_steps})"
            print(f"| {bug or 'healthy'} | {seen} | {when} | {largest:.2g} |", flush=True)


if __name__ == "__main__":
    main()
