"""A whole gradient's RMS, a parameter at a time (``crosscheck._compare.whole``): bit for bit the RMS of
the arrays' float64 concatenation (NumPy's pairwise sum, split where NumPy splits it), without it."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from crosscheck._compare import terms, whole

SIZES = [0, 1, 3, 7, 8, 9, 100, 127, 128, 129, 1000, 4097, 20000]


def _concatenated(arrays):
    return terms.rms(np.concatenate([np.ravel(np.nan_to_num(np.asarray(a, np.float64))) for a in arrays]))


@pytest.mark.parametrize("seed", range(40))
def test_the_rms_of_arrays_laid_end_to_end_is_bit_for_bit_the_concatenations(seed):
    rng = np.random.default_rng(seed)
    arrays = []
    for _ in range(int(rng.integers(1, 12))):
        size = int(rng.choice(SIZES))
        a = rng.standard_normal(size) * 10.0 ** rng.uniform(-8, 8, size)
        if size and rng.random() < 0.2:
            a[0] = rng.choice([np.nan, np.inf, -np.inf])
        if rng.random() < 0.3:
            a = a.astype(np.float32)
        if size > 4 and rng.random() < 0.2:
            a = a.reshape(-1, 1)[::2]  # not contiguous
        arrays.append(a)
    with np.errstate(over="ignore"):  # an infinity, made the largest float, squares to infinity
        assert whole.rms(arrays) == _concatenated(arrays)


def test_long_arrays_and_none():
    rng = np.random.default_rng(7)
    arrays = [rng.standard_normal(n).astype(np.float32) for n in (300_001, 17, 123_457, 50_000)]
    assert whole.rms(arrays) == _concatenated(arrays)
    assert whole.rms([]) == 0.0 == whole.rms([np.zeros(0)])


def test_it_widens_one_part_at_a_time_never_every_array():
    arrays = [np.ones(1_000_000, np.float32) * (i + 1) for i in range(4)]
    tracemalloc.start()
    found = whole.rms(arrays)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert found == _concatenated(arrays)
    assert peak < 2 * 8 * 1_000_000  # one array's float64 squares and its masks (concatenated: 8 of them)
