"""The screen's blind spot, and every entry judged: a stack gradient whose 9th largest entry of a layer is
off by x1.002.

Run from the repository root: ``python benchmarks/stack_ninth_entry.py [--dim 1024] [--factor 1.002]``.

1. ``crosscheck.run(dim=D, batch=8)`` with that candidate (a correct float32 NumPy gradient, the 9th
   largest entry of the layer that holds the largest multiplied by the factor): what the screen says.
2. The oracle that differences the layers' outputs (``oracle/preactivation.py``) at the same point, and
   every entry of each candidate (that one, the correct NumPy gradient, and the jax and torch backends
   where installed) compared with it within the terms of the judge's full comparison
   (``compare_full``): the candidate's modelled float32 rounding, the oracle's error bar and the floor
   (no user slack; the kink term is left out: the count of float32-ambiguous pre-activations is printed,
   and none is expected at this point up to d = 1024). Prints, per candidate, the entries beyond their
   tolerance and the worst one.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests", "support")]

import planted  # noqa: E402  (tests/support: the hand-written NumPy gradients)

import crosscheck  # noqa: E402
from crosscheck._compare import terms  # noqa: E402
from crosscheck._compare.constants import UNIT_ROUNDOFF  # noqa: E402
from crosscheck._workloads.stack import kinks, rounding  # noqa: E402
from crosscheck._workloads.stack.forward import backward, forward  # noqa: E402
from crosscheck._workloads.stack.oracle import preactivation  # noqa: E402


def off_at_ninth(factor: float):
    """A correct float32 gradient whose 9th largest entry (by magnitude) of the layer holding the largest
    is multiplied by ``factor``."""

    def grad(weights, x):
        g = planted.correct(weights, x)
        layer = int(np.unravel_index(np.argmax(np.abs(g)), g.shape)[0])
        flat = np.argsort(np.abs(g[layer]).ravel())[-9]
        g[(layer, *np.unravel_index(flat, g.shape[1:]))] *= factor
        return g

    grad.__name__ = f"ninth_off_by_{factor:g}"
    return grad


def candidates(factor: float) -> dict:
    found = {"ninth": off_at_ninth(factor), "numpy": planted.correct}
    for name in ("jax", "torch"):
        try:
            found[name] = crosscheck.load_backend(name).grad
        except crosscheck.BackendUnavailable:
            pass
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dim", type=int, default=1024)
    parser.add_argument("--factor", type=float, default=1.002)
    args = parser.parse_args()
    wrong = off_at_ninth(args.factor)
    start = time.perf_counter()
    report = crosscheck.run(dim=args.dim, batch=8, backends=[wrong])
    comparison = report.to_dict()["comparisons"][0]
    print(f"screen: {'PASSED' if report.passed else 'FAILED'} in {time.perf_counter() - start:.1f} s")
    print(f"  coverage: {comparison.get('coverage', '')}")

    weights, x = crosscheck.make_inputs(crosscheck.Case(dim=args.dim, batch=8))
    start = time.perf_counter()
    est = preactivation.estimate(weights, x)
    seconds = time.perf_counter() - start
    print(f"oracle from the layers' outputs: {seconds:.1f} s, {est.kink.sum()} kink entries")
    fwd = forward(weights, x)
    deltas, _ = backward(fwd, grads=False)
    model = rounding.rounding_model(fwd, deltas, "float32")
    ambiguous = kinks.ambiguous_kinks(fwd, [model.z_bound(k) for k in range(len(weights))])
    print(f"  float32-ambiguous pre-activations: {len(ambiguous)}")
    floor = terms.floor(terms.largest(est.value), UNIT_ROUNDOFF["float32"], ulps=terms.SAFETY_FLOOR_ULPS)
    tolerance = model.grad_bound + est.error + floor
    for name, grad in candidates(args.factor).items():
        diff = np.abs(np.asarray(grad(weights.copy(), x.copy()), np.float64) - est.value)
        ratio = diff / tolerance
        worst = np.unravel_index(np.argmax(ratio), ratio.shape)
        beyond = int(np.count_nonzero(diff > tolerance))
        print(
            f"  {name}: {beyond} of {diff.size} entries beyond their tolerance; worst"
            f" {tuple(map(int, worst))} at {ratio[worst]:.3g} x its tolerance ({diff[worst]:.3g} against"
            f" {tolerance[worst]:.3g}, of which the oracle's bar {est.error[worst]:.2g}; the entry"
            f" {est.value[worst]:.5g})"
        )


if __name__ == "__main__":
    main()
