"""What the JAX side of a port keeps after a check (issue 38): no device array. Its gradient and loss
functions take the parameters as arguments (never constants of a compiled function), the adapter's
resident arrays are released after the oracle's differences and cleared by a gradient, and the module
captures return NumPy records. Counted with ``jax.live_arrays()``, no memory timed.

Each check is measured after a first check of the same model with other parameter values: JAX keeps a
few scalar constants of its own for the rest of the process the first time a model runs (so a test run
alone would count them), while a program holding the parameters as constants would be compiled, and its
arrays kept, anew for the new values."""

from __future__ import annotations

import gc
import sys

import pytest
from paths import ROOT

jax = pytest.importorskip("jax")
pytest.importorskip("torch")
pytest.importorskip("flax")

sys.path.insert(0, str(ROOT))  # the examples/ package of the repository

import crosscheck  # noqa: E402


def _live() -> set[int]:
    gc.collect()
    return {id(a) for a in jax.live_arrays()}


@pytest.mark.parametrize("reference", ["numpy-fd", "torch"])
def test_a_port_check_leaves_no_jax_array_behind(reference):
    import torch

    from examples.port import transformer_linen

    other = transformer_linen.torch_model()
    with torch.no_grad():
        for p in other.parameters():
            p.mul_(0.9)
    execution = crosscheck.Execution(isolate=False)
    first = crosscheck.Port(
        name="other-values", torch=other, jax=transformer_linen.flax_model(), inputs=transformer_linen.tokens
    )
    assert crosscheck.check(first, reference=reference, execution=execution).passed
    port = transformer_linen.make_port()
    before = _live()
    report = crosscheck.check(port, reference=reference, execution=execution)
    assert report.passed, report.problems
    new = _live() - before  # once: inside the comprehension it collected the garbage once per live array
    left = [a for a in jax.live_arrays() if id(a) in new]
    assert left == [], [(a.shape, a.dtype) for a in left]
