"""Side by side on the port examples: what three checks say about each planted bug and the healthy pair.

- ``assert_close``: ``torch.testing.assert_close`` with its default tolerances (float32: rtol 1.3e-6,
  atol 1e-5) on the JAX port's gradients, mapped back to PyTorch's names, against PyTorch's: how many
  parameter tensors it flags, and the one with the greatest difference.
- ``output 1e-5``: the greatest difference of the model's outputs (the pre-5.0 Hugging Face PyTorch/Flax
  equivalence tests' check, ``max |out_pt - out_fx| <= 1e-5``).
- ``crosscheck``: ``crosscheck.run(workload=port, reference="torch")``: its verdict, the module it names.

Every check runs in float32 on the same weights (the PyTorch model's, copied through the mapping) and
inputs (seed 0). ``assert_close`` on a healthy pair passes or not by a thin margin (how close its
closest entry comes to its tolerance is printed: the order of float32 sums, set by thread counts and
the seed, moves it); ``--seeds N`` runs the healthy pairs on seeds 0 to N-1 to show how often it
raises a false alarm. Run from the repository root::

    python benchmarks/compare_ports.py            # prints a Markdown table
    python benchmarks/compare_ports.py --seeds 6  # the healthy pairs, seeds 0-5, a row each
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import crosscheck
from crosscheck._workloads.port.declare.build import jax_leaves
from crosscheck._workloads.port.sides import jax_side, torch_side


def gradients(report):
    return report.gradients["torch"], report.gradients["jax"]


def assert_close_says(torch_grads, jax_grads):
    import torch

    flagged, worst, closest = [], (0.0, ""), (0.0, "")
    for name, expected in torch_grads.items():
        diff = np.abs(jax_grads[name].astype(np.float64) - expected)
        worst = max(worst, (float(np.max(diff)), name))
        # assert_close's float32 defaults: |actual - expected| <= atol + rtol * |expected|.
        closest = max(closest, (float(np.max(diff / (1e-5 + 1.3e-6 * np.abs(expected)))), name))
        try:
            # The reference's record is float64; PyTorch computed it in float32, like the port.
            mine = jax_grads[name]
            torch.testing.assert_close(torch.as_tensor(mine), torch.as_tensor(expected.astype(mine.dtype)))
        except AssertionError:
            flagged.append(name)
    if not flagged:
        return f"passes ({closest[0]:.2f} of its tolerance at `{closest[1]}`)"
    return f"flags {len(flagged)}/{len(torch_grads)} tensors; worst `{worst[1]}`"


def outputs(port):
    """The model's output on both sides, float32, from the port's own arrays (seed 0)."""
    prepared = port.prepared
    params, inputs = prepared.workload.make(seed=0, dtype="float32")
    state = torch_side.to_torch({**params, **prepared.torch_state(inputs)})
    out_pt = torch_side.call(prepared.torch_side, state, torch_side.to_torch(prepared.user_inputs(inputs)))
    p, i = jax_side.to_jax(params), jax_side.to_jax(inputs)
    given = prepared.user_inputs(i)
    jax_in = port.jax_inputs(given) if port.jax_inputs else given
    out_fx = prepared.jax_side.forward(jax_leaves(prepared, p, i), dict(jax_in), np.float32)
    first = crosscheck._workloads.port.declare.build._first
    return first(out_pt).detach().numpy(), np.asarray(first(out_fx))


def output_says(port):
    pt, fx = outputs(port)
    diff = float(np.max(np.abs(pt.astype(np.float64) - fx)))
    return ("passes" if diff <= 1e-5 else "fails") + f" ({diff:.1e})"


def crosscheck_says(report):
    verdict = report.backends["jax"].notes["port"]
    if report.passed:
        return "passes"
    where = {
        "forward": "forward, at",
        "gradient": "gradient only, at",
        "running statistics": "running statistics only, at",
    }.get(verdict["starts_in"], "")
    module = (
        f"`{verdict['module']}`"
        if verdict["module"]
        else f"the top module's code before `{verdict['first']}`"
    )
    return f"fails: {where} {module}"


def ports():
    from examples.port import convnet, gpt2

    yield "convnet", "healthy", convnet.port
    for bug in convnet.BUGS:
        yield "convnet", bug, getattr(convnet, bug)
    yield "gpt2", "healthy", gpt2.port
    for bug in gpt2.BUGS:
        yield "gpt2", bug, getattr(gpt2, bug)


def false_alarms(seeds: int) -> None:
    """The healthy pairs on seeds 0 to ``seeds - 1``: what assert_close and crosscheck say of each."""
    from examples.port import convnet, gpt2

    print("| model | seed | assert_close (gradients) | crosscheck |")
    print("| --- | --- | --- | --- |")
    for model, port in (("convnet", convnet.port), ("gpt2", gpt2.port)):
        for seed in range(seeds):
            report = crosscheck.run(workload=port, reference="torch", backends=["jax"], seed=seed)
            says = assert_close_says(*gradients(report))
            print(f"| {model} | {seed} | {says} | {crosscheck_says(report)} |", flush=True)
    footer()


def footer() -> None:
    import torch

    load = os.getloadavg() if hasattr(os, "getloadavg") else ("?",)
    print(
        f"\n{platform.platform()}, {os.cpu_count()} CPUs, torch threads {torch.get_num_threads()}, "
        f"load {load[0]:.2f}, {time.strftime('%Y-%m-%d %H:%M')}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=0, help="the healthy pairs on seeds 0 to N-1 instead")
    if (seeds := parser.parse_args().seeds) > 0:
        false_alarms(seeds)
        return
    rows = []
    for model, bug, port in ports():
        start = time.perf_counter()
        report = crosscheck.run(workload=port, reference="torch", backends=["jax"])
        seconds = time.perf_counter() - start
        torch_grads, jax_grads = gradients(report)
        rows.append(
            (
                model,
                bug,
                assert_close_says(torch_grads, jax_grads),
                output_says(port),
                crosscheck_says(report),
                f"{seconds:.1f}",
            )
        )
    print("| model | planted bug | assert_close (gradients) | output check 1e-5 | crosscheck | seconds |")
    print("| --- | --- | --- | --- | --- | --- |")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    footer()


if __name__ == "__main__":
    main()
