"""A module output compared (``localize.compare_arrays``) in fewer arrays, with the same numbers: its
measured rounding made in place (the formula it replaced, kept here, gives every number), and a
float64 array read as it is."""

from __future__ import annotations

import numpy as np
import pytest

from crosscheck._compare import terms as _terms
from crosscheck._workloads.port.judge import localize


def _old_rounding(main, other, dtype):
    scale = _terms.widening(dtype)
    with np.errstate(invalid="ignore"):
        d = np.nan_to_num(np.abs(main - other), nan=0.0, posinf=0.0)
    wide = main if dtype == "float64" else other
    d, redrawn = _terms.capped(d, wide)
    return _terms.measured(scale * d), redrawn


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_measured_rounding_is_the_old_formula_made_in_fewer_arrays(seed, dtype):
    """``_rounding``'s difference made and cleaned in one array, widened and measured in the capped
    one: bit for bit the numbers of the formula, NaN, infinities and a re-run made again included."""
    rng = np.random.default_rng(seed)
    main = rng.standard_normal(5_000) * 10.0 ** rng.uniform(-8, 8)
    other = main + rng.standard_normal(5_000) * np.abs(main) * 10.0 ** rng.uniform(-12, 0)
    for a in (main, other):
        if rng.random() < 0.5:
            a[rng.integers(5_000, size=3)] = rng.choice([np.nan, np.inf, -np.inf], size=3)
    with np.errstate(invalid="ignore", over="ignore"):
        got, redrawn = localize._rounding(main, other, dtype)
        old, old_redrawn = _old_rounding(main, other, dtype)
    np.testing.assert_array_equal(got, old)
    assert redrawn == old_redrawn


def test_a_module_output_is_compared_without_copies_of_its_arrays():
    """A float64 array is read as it is (a view, never concatenated alone), and the rounding terms are
    made in place: a million entries compared within six arrays' worth of memory at once."""
    import tracemalloc

    rng = np.random.default_rng(0)
    t = rng.standard_normal(1_000_000)
    j = t + 1e-7 * rng.standard_normal(t.size)
    kept = localize._vector((t,), (j,), False)
    assert np.shares_memory(kept[0], t) and np.shares_memory(kept[1], j)
    runs = dict(dtype="float32", channels_last=False, backend="jax", reference="torch")
    localize.compare_arrays("x", ((t,), (j,)), ((j,), ()), **runs)  # the layouts' candidates made once
    tracemalloc.start()
    try:
        found = localize.compare_arrays("x", ((t,), (j,)), ((j,), ()), **runs)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert found.judged == t.size
    assert peak < 6 * t.nbytes, peak / t.nbytes


@pytest.mark.parametrize("missing", ["jax", "torch"])
def test_a_side_without_a_re_run_has_no_rounding_of_its_own_measured(monkeypatch, missing):
    """A side that was not re-run takes the other side's measured rounding: its own (a difference of
    its run with itself) is not measured, a pass over every entry saved, and both terms are the other
    side's, the verdict unchanged."""
    rng = np.random.default_rng(1)
    t = rng.standard_normal(10_000)
    again = t * (1 + 1e-7 * rng.standard_normal(t.size))
    j = t + 1e-9 * rng.standard_normal(t.size)
    measured = []
    real = localize._rounding
    monkeypatch.setattr(localize, "_rounding", lambda main, *a: measured.append(main) or real(main, *a))
    torch_runs, jax_runs = ((t,), (again,)), ((j,), ())
    if missing == "torch":
        torch_runs, jax_runs = ((t,), ()), ((j,), (again,))
    runs = dict(dtype="float32", channels_last=False, backend="jax", reference="torch", keep=True)
    found = localize.compare_arrays("x", torch_runs, jax_runs, **runs)
    assert len(measured) == 1
    assert np.shares_memory(measured[0], t if missing == "jax" else j)
    terms = found.arrays is not None and found.worst_terms
    assert found.passed and terms and terms["rounding"] == terms["reference"] > 0
