"""The faster term helpers give bit for bit the numbers of the formulas they replaced (issue 38's time):
``terms.rms`` a piece at a time, ``terms.bound`` and ``terms.median_ratio`` without their NaN passes
where there is no NaN, ``terms.median``, ``terms.largest``, ``whole.finite``; on random inputs with NaN,
infinities, zeros, float32 and 0-d arrays."""

from __future__ import annotations

import math

import numpy as np
import pytest

from crosscheck._compare import terms, whole
from crosscheck._compare.dtypes import unit_roundoff


def _old_rms(values):
    return math.sqrt(float(np.mean(np.square(values)))) if np.size(values) else 0.0


def _old_bound(wide, shared=0.0, dtype="float32"):
    value = np.abs(np.asarray(wide, np.float64))
    if not isinstance(value, np.ndarray):
        value = np.nan_to_num(value, nan=0.0, posinf=0.0)
        return terms.permit_ulps(dtype) * unit_roundoff(dtype) * (value + _old_rms(value) + shared)
    np.nan_to_num(value, copy=False, nan=0.0, posinf=0.0)
    spread = _old_rms(value)
    value += spread
    value += shared
    value *= terms.permit_ulps(dtype) * unit_roundoff(dtype)
    return value


def _old_median_ratio(diff, permit, wide=None):
    ratios = np.atleast_1d(np.abs(np.asarray(diff, np.float64)))
    zero = ratios == 0
    informative = None if wide is None else ~zero | (np.asarray(wide) != 0)
    inside = np.broadcast_shapes(ratios.shape, np.shape(permit)) == ratios.shape
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = np.divide(ratios, permit, out=ratios if inside else None)
    ratios[np.broadcast_to(zero, ratios.shape)] = 0.0
    if informative is not None:
        ratios = ratios[np.broadcast_to(informative, ratios.shape)]
    if np.size(ratios) == 0:
        return 0.0
    np.nan_to_num(ratios, copy=False, nan=np.inf)
    return float(np.median(ratios, overwrite_input=True))


def _same(a, b) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


def _array(rng, *, special: bool = True, allow_0d: bool = True) -> np.ndarray:
    shape = [(), (1,), (2,), (7,), (64, 3), (5, 4, 3), (70_001,), (300, 700)][
        int(rng.integers(0 if allow_0d else 1, 8))
    ]
    a = rng.standard_normal(shape) * 10.0 ** rng.uniform(-12, 12, shape)
    a = np.asarray(a)
    if a.size and rng.random() < 0.4:  # zeros, many of them sometimes
        a[rng.random(shape) < rng.choice([0.01, 0.5, 1.0])] = 0.0
    if special and a.size and rng.random() < 0.4:
        for _ in range(int(rng.integers(1, 4))):
            a.reshape(-1)[int(rng.integers(a.size))] = rng.choice([np.nan, np.inf, -np.inf])
    if rng.random() < 0.3:
        a = a.astype(np.float32)
    return a


@pytest.mark.parametrize("seed", range(60))
def test_rms_bound_and_largest_are_the_old_formulas(seed):
    rng = np.random.default_rng(seed)
    a = _array(rng)
    with np.errstate(over="ignore", invalid="ignore"):
        assert _same(terms.rms(a), _old_rms(a))
        assert _same(terms.rms(np.asarray(a, np.float64)), _old_rms(np.asarray(a, np.float64)))
        for shared in (0.0, 0.37):
            new, old = terms.bound(a, shared), _old_bound(a, shared)
            assert type(new) is type(old)
            assert np.array_equal(new, old, equal_nan=True)
            assert np.array_equal(np.signbit(new), np.signbit(old))
        assert _same(terms.largest(a), float(np.max(np.abs(a), initial=0.0)))
    assert whole.finite(a) == bool(np.all(np.isfinite(a)))


def test_a_finite_array_whose_sum_overflows_takes_the_general_path_with_the_same_numbers():
    a = np.full(1000, 1e307)
    assert not whole.finite(a)  # the sum overflowed: the careful path, not a wrong answer
    with np.errstate(over="ignore"):
        assert terms.rms(a) == _old_rms(a) == math.inf
        assert np.array_equal(terms.bound(a), _old_bound(a))


@pytest.mark.parametrize("seed", range(200))
def test_median_ratio_is_the_old_formula(seed):
    rng = np.random.default_rng(1000 + seed)
    diff = _array(rng)
    permit = _old_bound(rng.standard_normal(diff.shape))
    if rng.random() < 0.2:
        permit = np.float64(rng.uniform(0, 1e-3))  # a scalar permit, broadcast
    elif isinstance(permit, np.ndarray) and rng.random() < 0.3:
        permit[rng.random(diff.shape) < 0.1] = rng.choice([0.0, -0.0, -1e-3])  # 0 / 0, a sign bit
    wide = None
    if rng.random() < 0.8:
        wide = np.where(rng.random(diff.shape) < 0.3, 0.0, rng.standard_normal(diff.shape))
        if wide.size and rng.random() < 0.2:
            wide.reshape(-1)[0] = np.nan
    with np.errstate(over="ignore", invalid="ignore"):
        assert _same(terms.median_ratio(diff, permit, wide), _old_median_ratio(diff, permit, wide))


@pytest.mark.parametrize("size", [1, 2, 3, 4, 5, 10, 11, 1000, 1001])
def test_median_is_numpys(size):
    rng = np.random.default_rng(size)
    for values in (rng.standard_normal(size), rng.integers(0, 3, size).astype(float), np.zeros(size)):
        assert terms.median(values.copy()) == float(np.median(values.copy(), overwrite_input=True))
    with_inf = rng.standard_normal(size)
    with_inf[0] = np.inf
    assert terms.median(with_inf.copy()) == float(np.median(with_inf))


def test_median_skips_the_least_entries():
    rng = np.random.default_rng(3)
    for size, zeros in ((10, 3), (11, 4), (5, 4), (6, 4), (1000, 999)):
        values = np.concatenate([np.zeros(zeros), np.abs(rng.standard_normal(size - zeros)) + 0.5])
        rng.shuffle(values)
        assert terms.median(values.copy(), skip=zeros) == float(np.median(values[values != 0]))


def _old_capped(diff, wide, dtype="float32"):
    diff = np.abs(np.asarray(diff, np.float64))
    with np.errstate(over="ignore"):
        limit = terms.bound(wide, 0.0, dtype)
    edge = (np.abs(np.nan_to_num(np.asarray(wide, np.float64))) >= terms.RANGE_EDGE) | (
        diff >= terms.RANGE_EDGE
    )
    over = (diff > limit) & ~edge
    count = int(np.count_nonzero(over))
    redrawn = None
    if count >= terms.REDRAWN_ENTRIES and count > terms.REDRAWN_SHARE * diff.size:
        with np.errstate(divide="ignore", invalid="ignore"):
            worst = float(np.max(np.where(over, diff / limit, 0.0)))
        redrawn = terms.Redrawn(count, int(diff.size), worst, dtype)
    return np.minimum(diff, limit), redrawn


@pytest.mark.parametrize("seed", range(40))
def test_capped_is_the_old_formula(seed):
    """Its edge read without a copy of the wide result (NaN at no edge, an infinity at both) and its
    result made in the bound's array: the same numbers, NaN, infinities and the range's edge included."""
    rng = np.random.default_rng(seed)
    wide = _array(rng, allow_0d=False)
    diff = np.abs(rng.standard_normal(wide.shape)) * 10.0 ** rng.uniform(-14, 14, wide.shape)
    if wide.size and rng.random() < 0.4:
        diff.reshape(-1)[int(rng.integers(wide.size))] = rng.choice([np.nan, np.inf])
    if wide.size and rng.random() < 0.3:  # entries at the range's edge
        wide.reshape(-1)[:: max(1, wide.size // 5)] = terms.RANGE_EDGE * rng.choice([-2.0, 0.5, 2.0])
    with np.errstate(invalid="ignore", over="ignore"):
        got, redrawn = terms.capped(diff, wide)
        old, old_redrawn = _old_capped(diff, wide)
    np.testing.assert_array_equal(got, old)
    assert redrawn == old_redrawn


@pytest.mark.parametrize(
    ("diff", "wide"),
    [
        (np.float64(1e-3), np.float64(2.0)),  # 0-d both
        (np.full(3, 1e-9), np.float64(2.0)),  # a 0-d wide result
        (np.full((2, 3), 1e30), np.array([1.0, np.inf, np.nan])),  # one that broadcasts
    ],
)
def test_capped_is_the_old_formula_on_scalars_and_broadcasts(diff, wide):
    with np.errstate(invalid="ignore", over="ignore"):
        got, redrawn = terms.capped(diff, wide)
        old, old_redrawn = _old_capped(diff, wide)
    np.testing.assert_array_equal(got, old)
    assert redrawn == old_redrawn
