"""A measured rounding's signed difference kept in float32 (issue 38: ``rounding.Narrowed``, 4 bytes a
parameter, not 8), each parameter's scaled by a power of two so that no entry leaves float32's range,
read back in float64 with float32's precision; and a candidate's float64 re-run freed as it is measured."""

from __future__ import annotations

import gc
import math
import tracemalloc
import weakref

import numpy as np
import pytest

import crosscheck
from crosscheck._compare import terms
from crosscheck._workloads.model.measured import Measured, Narrowed
from crosscheck._workloads.model.rounding import measure

SCALES = {"tiny": 1e-30, "small": 1e-3, "unit": 1.0, "huge": 1e35}


@pytest.mark.parametrize("seed", [0, 1])
def test_a_difference_is_kept_in_float32_at_its_own_scale_and_read_back_in_float64(seed):
    """Every parameter's difference in a float64 case (``(g64 - g32) * 2**-29``), from about 1e-46
    (below float32's smallest number: unscaled, every entry would flush to zero) to 1e26, is kept as
    float32 and read back as its float64 difference rounded once to float32's 24 bits: within 2**-24
    relative, entry by entry, no nonzero entry read back as zero; its term is made from that and from
    the float64 difference's RMS, whole or a block at a time."""
    rng = np.random.default_rng(seed)
    wide = {k: rng.standard_normal((60, 50)) * s for k, s in SCALES.items()}
    again = {k: w.astype(np.float32) for k, w in wide.items()}  # its float32 re-run
    shapes = {k: w.shape for k, w in wide.items()}
    found = measure(wide, again, shapes=shapes, dtype="float64", name="x")
    assert isinstance(found.delta, Narrowed) and isinstance(found.term, Measured), found.how
    with np.errstate(under="ignore"):
        assert np.all(np.float32((wide["tiny"] - again["tiny"]) * terms.widening("float64")) == 0)
    for k in SCALES:
        exact = (wide[k] - again[k]) * terms.widening("float64")
        stored = found.delta.stored[k]
        assert stored.dtype == np.float32 and stored.nbytes == exact.nbytes // 2
        assert 0.5 <= np.max(np.abs(stored)) <= 1.0  # its largest entry near 1: a power of two apart
        back = found.delta[k]
        assert back.dtype == np.float64 and back.shape == exact.shape
        assert np.all((back == 0) == (exact == 0)), k  # nothing flushed to zero
        assert np.max(np.abs(back - exact) / np.abs(exact)) <= 2.0**-24, k
        spread = terms.rms(exact)
        assert np.array_equal(found.term[k], terms.measured(np.abs(back), spread)), k
        made = found.term.made(k)  # the comparison's blocks: the same numbers
        assert np.array_equal(made.rows(slice(3, 9)), found.term[k][3:9]), k
        assert made.at((4, 7)) == found.term[k][4, 7], k


def test_a_zero_difference_and_an_empty_parameter_are_kept():
    narrowed = Narrowed()
    for k, signed in {
        "zero": np.zeros((3, 2)),
        "empty": np.zeros((0, 4)),
        "scalar": np.array(-3e-300),
    }.items():
        narrowed.keep(k, signed)
        assert narrowed[k].dtype == np.float64 and narrowed[k].shape == signed.shape
    mantissa, exponent = math.frexp(-3e-300)  # kept as its mantissa in float32, its exponent aside
    assert np.all(narrowed["zero"] == 0)
    assert narrowed["scalar"] == math.ldexp(float(np.float32(mantissa)), exponent)


def test_a_consumed_re_run_keeps_half_a_float64_difference_a_parameter():
    """What a float32 case's measured rounding keeps (issue 38): its differences in float32, half the
    re-run's size, and the re-run's arrays dropped as each is measured (``consume``). Traced: 2.0
    tensors of four kept (4.0 when each difference was kept in float64, in the re-run's arrays)."""
    rng = np.random.default_rng(5)
    shapes = {f"w{i}": (500, 1000) for i in range(4)}
    wide = {k: rng.standard_normal(s) for k, s in shapes.items()}
    narrow = {k: w.astype(np.float32) for k, w in wide.items()}
    size = wide["w0"].nbytes
    tracemalloc.start()
    try:
        again = {k: w.copy() for k, w in wide.items()}  # the engine's copies of a re-run, traced
        found = measure(narrow, again, shapes=shapes, dtype="float32", name="x", consume=True)
        del again
        kept = tracemalloc.get_traced_memory()[0] / size
    finally:
        tracemalloc.stop()
    assert found.delta is not None and not found.excess
    assert kept < 2.1, kept


def test_a_re_runs_arrays_are_gone_before_its_gradient_is_copied_out():
    """The judge's re-run in the other dtype (``judge.rounding``, issue 38): the float64 parameters it
    hands the backend are freed when the call returns, before the engine copies the float64 gradient
    out of the backend (they were held together: 16 bytes a parameter at the check's peak)."""

    def loss(p, i):
        return float(np.sum(np.tanh(i["x"] @ p["w"]) @ p["v"]))

    def grad(p, i):
        h = np.tanh(i["x"] @ p["w"])
        ones = np.ones((i["x"].shape[0], 8), h.dtype)
        return {"w": i["x"].T @ ((ones @ p["v"].T) * (1 - h * h)), "v": h.T @ ones}

    seen: list[tuple[str, list[bool]]] = []

    class Late:
        def __init__(self, value, refs):
            self.value, self.refs = value, refs

        def __array__(self, dtype=None, copy=None):
            seen.append((self.value.dtype.name, [r() is not None for r in self.refs]))
            return self.value

    class Recording:
        name = "recording"

        def grad(self, p, i):
            refs = [weakref.ref(v) for v in p.values()]
            return {k: Late(v, refs) for k, v in grad(p, i).items()}

    workload = crosscheck.Workload(
        name="t", parameters={"w": (64, 32), "v": (32, 8)}, inputs={"x": (16, 64)}, reference=loss
    )
    gc.disable()
    try:
        report = crosscheck.run(workload=workload, backends=[Recording()], reference=grad)
    finally:
        gc.enable()
    assert report.passed, report.problems
    rerun = [alive for dtype, alive in seen if dtype == "float64"]
    assert rerun and all(alive == [False, False] for alive in rerun), seen
