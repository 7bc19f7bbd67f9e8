"""The per-entry comparison, a block of rows at a time (issue 38): the same record whatever the block
size, hand-computed extremes (the first index on ties, as ``np.argmax``; the worst entries the last
index first on ties, as a stable ``argsort`` reversed), a memory bound of a few blocks, and per-entry
arrays kept only when a plot asks for them."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from crosscheck._compare import entries
from crosscheck._compare.compare import compare
from crosscheck._compare.record import Kinks, Tolerance


def _hand() -> tuple[np.ndarray, np.ndarray, Tolerance, Kinks]:
    """A (2, 3) parameter, every number exact in binary: tolerance 0.25; (0, 1) unjudgeable (kink
    (1, 4)); (1, 1) two-sided (kink (0, 7)), off by 1 on one side and 0 on the other; (1, 2) not
    checked (NaN reference); (0, 0) and (0, 2) tie at half the tolerance, (1, 0) is twice it."""
    reference = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, np.nan]])
    candidate = np.array([[1.125, 2.0, 3.125], [4.5, 6.0, 7.0]])
    unjudgeable = np.zeros((2, 3), bool)
    unjudgeable[0, 1] = True
    kink = np.full((2, 3, 2), -1)
    kink[0, 1], kink[1, 1] = (1, 4), (0, 7)
    alternative = np.full((2, 3), np.nan)
    alternative[1, 1] = 6.0
    reason = np.where(unjudgeable, "a kink in reach", "").astype(object)
    tolerance = Tolerance({"t": np.full((2, 3), 0.25)})
    return candidate, reference, tolerance, Kinks(unjudgeable, reason, kink, alternative)


def _compare(candidate, reference, tolerance, kinks=None, **keywords):
    return compare(
        candidate,
        reference,
        tolerance,
        backend="b",
        reference_name="r",
        dtype="float64",
        kinks=kinks,
        **keywords,
    )


@pytest.mark.parametrize("chunk", [entries.CHUNK, 1])
def test_hand_computed_counts_extremes_worst_entries_and_rows(monkeypatch, chunk):
    monkeypatch.setattr(entries, "CHUNK", chunk)  # 1: a block per row
    c = _compare(*_hand(), split="layer")
    assert (c.status, c.judged, c.mismatched, c.unjudgeable, c.two_sided) == ("mismatch", 4, 1, 1, 1)
    assert c.unjudgeable_reasons == {"a kink in reach": 1}
    assert c.kinks == [[0, 7], [1, 4]]
    assert (c.max_abs_diff, c.max_abs_diff_index) == (0.5, (1, 0))
    assert (c.max_rel_diff, c.max_rel_diff_index) == (0.125, (0, 0))  # (1, 0) ties: the first
    assert (c.worst_ratio, c.worst_index, c.worst_values) == (
        2.0,
        (1, 0),
        {"candidate": 4.5, "reference": 4.0},
    )
    worst = [(w["index"], w["ratio"], w["kink"]) for w in c.worst_entries]
    assert worst == [([1, 0], 2.0, None), ([0, 2], 0.5, None), ([0, 0], 0.5, None), ([1, 1], 0.0, [0, 7])]
    assert c.per_layer == [
        {"layer": 0, "judged": 2, "mismatched": 0, "worst_ratio": 0.5},
        {"layer": 1, "judged": 2, "mismatched": 1, "worst_ratio": 2.0},
    ]


def _random(
    rng: np.random.Generator, shape: tuple[int, ...]
) -> tuple[np.ndarray, np.ndarray, Tolerance, Kinks]:
    """Entries equal, near, past and far past a tolerance of three terms (one broadcast along the last
    axis, one NaN here and there), NaN reference entries, unjudgeable and two-sided ones."""
    reference = np.where(rng.random(shape) < 0.05, np.nan, rng.standard_normal(shape))
    candidate = np.where(rng.random(shape) < 0.2, reference, reference + 1e-7 * rng.standard_normal(shape))
    candidate = np.nan_to_num(candidate, nan=1.0)
    unjudgeable = rng.random(shape) < 0.05
    two = (rng.random(shape) < 0.05) & ~unjudgeable
    kink = np.where((unjudgeable | two)[..., None], rng.integers(0, 3, (*shape, 2)), -1)
    reason = np.where(unjudgeable, np.where(rng.random(shape) < 0.5, "x", "y"), "").astype(object)
    alternative = np.where(two, reference + 1e-7 * rng.standard_normal(shape), np.nan)
    terms = {
        "a": np.where(rng.random(shape) < 0.02, np.nan, np.abs(rng.standard_normal(shape)) * 1e-7),
        "b": np.float64(1e-8),
        "c": np.broadcast_to(np.abs(rng.standard_normal(shape[-1:])) * 1e-8, shape),
    }
    return candidate, reference, Tolerance(terms), Kinks(unjudgeable, reason, kink, alternative)


@pytest.mark.parametrize("shape", [(7,), (40, 33), (5, 6, 7), (1, 50)])
@pytest.mark.parametrize("keywords", [{}, {"strict": True}, {"split": "layer"}])
def test_the_record_is_the_same_whatever_the_block_size(monkeypatch, shape, keywords):
    case = _random(np.random.default_rng(sum(shape)), shape)
    whole = _compare(*case, keep=True, **keywords)
    records = []
    for chunk in (1, 7, 64):
        monkeypatch.setattr(entries, "CHUNK", chunk)
        records.append(_compare(*case, keep=True, **keywords))
    assert whole.judged and whole.mismatched and whole.two_sided and whole.unjudgeable
    assert len(whole.worst_entries) == 5
    for found in records:
        assert repr(found.to_dict()) == repr(whole.to_dict())  # NaN ratios (a NaN term) included
        assert found.arrays.keys() == whole.arrays.keys() == {"ratio", "unjudgeable", "two_sided"}
        for key, array in whole.arrays.items():
            np.testing.assert_array_equal(found.arrays[key], array)


def test_a_0d_parameter_is_one_block_without_rows():
    c = _compare(np.float64(1.5), np.asarray(1.0), Tolerance({"t": np.float64(0.25)}), split="layer")
    assert (c.judged, c.mismatched, c.worst_index, c.worst_ratio, c.per_layer) == (1, 1, (), 2.0, [])
    assert [w["index"] for w in c.worst_entries] == [[]]


def test_per_entry_arrays_are_kept_only_for_a_plot():
    candidate, reference, tolerance, kinks = _hand()
    assert _compare(candidate, reference, tolerance, kinks).arrays == {}
    arrays = _compare(candidate, reference, tolerance, kinks, keep=True).arrays
    np.testing.assert_array_equal(arrays["ratio"], [[0.5, np.nan, 0.5], [2.0, 0.0, np.nan]])
    np.testing.assert_array_equal(arrays["two_sided"], [[False, False, False], [False, True, False]])
    assert arrays["unjudgeable"] is kinks.unjudgeable


def test_comparing_a_4m_entry_tensor_allocates_a_few_blocks_not_the_tensor_ten_times():
    """Issue 38: the whole-tensor code made about ten float64 arrays of the tensor's size (205 MiB
    traced here); a block at a time, its temporaries are a few blocks' (15 MiB)."""
    rng = np.random.default_rng(0)
    reference = rng.standard_normal((8192, 512))
    candidate = (reference + 1e-9 * rng.standard_normal(reference.shape)).astype(np.float32)
    terms = {"rounding": np.full(reference.shape, 1e-7, np.float32), "floor": np.float64(1e-8)}
    tracemalloc.start()
    try:
        c = compare(candidate, reference, Tolerance(terms), backend="b", reference_name="r", dtype="float32")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert c.judged == reference.size and c.mismatched > 0
    block = entries.CHUNK * 8
    assert peak <= 10 * block < reference.nbytes, (peak, block)


# -- the faster block pass gives the numbers of the formulas it replaced (issue 38's time) ----------------


def _old_of(cls, c, r, tol, kinks, start):
    unjudgeable = np.asarray(kinks.unjudgeable).ravel()
    ref = r.ravel()
    judged = ~unjudgeable & np.isfinite(ref)
    wide = c.astype(np.float64).ravel()
    with np.errstate(invalid="ignore"):
        diff = np.abs(wide - ref)
    two_sided = judged & ~np.isnan(kinks.alternative).ravel()
    if np.any(two_sided):
        with np.errstate(invalid="ignore"):
            other = np.abs(wide - kinks.alternative.ravel())
        diff = np.where(two_sided, np.fmin(diff, other), diff)
    tol = tol.ravel()
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(diff == 0, 0.0, diff / tol)
        over = diff > tol
    return cls(start, int(r.shape[0]), ref, diff, ratio, judged, two_sided, over, unjudgeable)


def _old_rel(self):
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = self.diff / np.abs(self.reference)
    rel[self.diff == 0] = 0.0
    return rel


def _old_argmax(values, judged, every=False):  # the old formula: every entry masked
    masked = np.where(judged, values, -1.0)
    np.nan_to_num(masked, copy=False, nan=0.0, posinf=np.inf)
    index = int(np.argmax(masked))
    return index, float(masked[index])


def _special(rng, case):
    """``case`` with infinities, zeros, a float32 candidate, a negative or zero tolerance here and there."""
    candidate, reference, tolerance, kinks = case
    shape = reference.shape
    candidate = np.where(rng.random(shape) < 0.03, rng.choice([np.inf, -np.inf]), candidate)
    reference = np.where(rng.random(shape) < 0.03, np.inf, reference)
    reference = np.where(rng.random(shape) < 0.05, 0.0, reference)
    terms = dict(tolerance.terms)
    terms["z"] = np.where(rng.random(shape) < 0.05, -1e-3, np.where(rng.random(shape) < 0.05, -np.inf, 0.0))
    if rng.random() < 0.5:
        candidate = candidate.astype(np.float32)
    return candidate, reference, Tolerance(terms), kinks


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("chunk", [1, 7, 64, entries.CHUNK])
def test_the_block_pass_is_the_old_formulas(monkeypatch, seed, chunk):
    rng = np.random.default_rng(seed)
    shape = [(7,), (40, 33), (5, 6, 7), (1, 50), (300, 20)][seed % 5]
    case = _random(rng, shape)
    if seed % 2:
        case = _special(rng, case)
    if seed % 3 == 0:  # no kinks at all: ``Kinks.none``'s broadcast NaN, nothing two-sided
        case = (*case[:3], Kinks.none(shape))
    monkeypatch.setattr(entries, "CHUNK", chunk)
    dtype = np.asarray(case[0]).dtype.name
    with np.errstate(invalid="ignore", over="ignore"):
        new = compare(
            *case[:3], backend="b", reference_name="r", dtype=dtype, kinks=case[3], split="l", keep=True
        )
        monkeypatch.setattr(entries.Block, "of", classmethod(_old_of))
        monkeypatch.setattr(entries.Block, "rel", _old_rel)
        monkeypatch.setattr(entries, "argmax", _old_argmax)
        monkeypatch.setattr(entries, "_below", lambda *a, **k: False)
        monkeypatch.setattr(entries, "_none", lambda a: False)
        old = compare(
            *case[:3], backend="b", reference_name="r", dtype=dtype, kinks=case[3], split="l", keep=True
        )
    assert repr(new.to_dict()) == repr(old.to_dict())
    for key, array in old.arrays.items():
        np.testing.assert_array_equal(new.arrays[key], array)


def test_the_worst_entries_skip_a_block_only_below_them():
    """A later block that ties the fifth worst enters (the last index wins a tie); one below it does not."""
    reference = np.zeros((4, 5))
    candidate = np.array([[0.0] * 5, [1.0, 2.0, 3.0, 4.0, 5.0], [0.5] * 5, [1.0] + [0.0] * 4])
    old = entries.CHUNK
    try:
        entries.CHUNK = 5  # a block per row
        c = _compare(candidate, reference, Tolerance({"t": np.ones((4, 5))}))
    finally:
        entries.CHUNK = old
    assert [w["index"] for w in c.worst_entries] == [[1, 4], [1, 3], [1, 2], [1, 1], [3, 0]]


@pytest.mark.parametrize("shape", [(7, 5), (3,), ()])
def test_a_made_term_is_its_whole_arrays_numbers_by_rows_by_entry_and_whole(shape):
    """``record.Made`` (a term made a block at a time, issue 38): every block, entry and the whole array
    bit for bit those of ``make(source)``, and a comparison with it is the one with the whole term."""
    from crosscheck._compare.compare import compare
    from crosscheck._compare.record import Made, Tolerance

    rng = np.random.default_rng(3)
    source = rng.standard_normal(shape)
    whole = 3.0 * (np.abs(source) + 0.25)
    term = Made(source, lambda d: 3.0 * (np.abs(d) + 0.25))
    assert term.shape == shape and np.asarray(term).tobytes() == whole.tobytes()
    lead = whole.reshape(shape or (1,))
    assert term.rows(slice(1, 3)).tobytes() == lead[1:3].tobytes()
    for index in np.ndindex(*shape):
        assert term.at(index) == float(whole[index])
    ref = rng.standard_normal(shape)
    cand = ref + rng.standard_normal(shape) * 3.0
    got = [
        compare(
            cand,
            ref,
            Tolerance({"rounding": t, "floor": 0.5}),
            backend="a",
            reference_name="b",
            dtype="float64",
        )
        for t in (term, whole)
    ]
    assert repr(got[0].to_dict()) == repr(got[1].to_dict()) and got[0].worst_terms


@pytest.mark.parametrize("involved", ["none", "unjudgeable", "two-sided", "both"])
def test_a_blocks_kinks_are_the_unique_rows_of_those_involved(involved):
    """``entries.kink_rows`` (issue 38, change T4: a block with no unjudgeable or two-sided entry skips
    ``np.unique``): the same rows, shape and dtype as ``np.unique`` of the involved entries' kinks, for a
    broadcast kink index too."""
    rng = np.random.default_rng(len(involved))
    size, width = 60, 2
    kink = rng.integers(-1, 4, (size, width))
    unjudgeable = rng.random(size) < (0.2 if involved in ("unjudgeable", "both") else 0.0)
    two_sided = rng.random(size) < (0.2 if involved in ("two-sided", "both") else 0.0)
    zeros = np.zeros(size)
    block = entries.Block(0, size, zeros, zeros, zeros, ~unjudgeable, two_sided, zeros > 0, unjudgeable)
    for k in (kink, np.broadcast_to(kink[:1], kink.shape)):
        want = np.unique(k.reshape(-1, width)[unjudgeable | two_sided], axis=0)
        got = entries.kink_rows(block, k)
        assert got.shape == want.shape and got.dtype == want.dtype and np.array_equal(got, want)
    assert (involved == "none") == (got.size == 0)


@pytest.mark.parametrize("seed", range(8))
def test_the_greatest_entry_of_a_block_judged_whole_is_the_masked_ones(seed):
    """``entries.argmax(every=True)`` (issue 38, change T4: a block whose every entry is judged is read
    as it is, no masked copy) gives the index and value of the masked path, NaN as 0 and infinities
    kept, and leaves ``values`` untouched; ``Block.rel`` with the zero mask of ``Block.of`` is the one
    it makes itself, bit for bit."""
    rng = np.random.default_rng(seed)
    values = np.abs(rng.standard_normal(300)) * (rng.random(300) < 0.7)
    if seed % 2:
        values[rng.integers(0, 300, 3)] = [np.nan, np.inf, 0.0]
    if seed % 4 == 3:
        values[:] = np.nan
    before = values.copy()
    judged = np.ones(300, bool)
    assert entries.argmax(values, judged, every=True) == entries.argmax(values, judged)
    assert np.array_equal(values, before, equal_nan=True)
    reference = rng.standard_normal(300).astype([np.float32, np.float64][seed % 2]) * (rng.random(300) < 0.8)
    diff = np.abs(rng.standard_normal(300)) * (rng.random(300) < 0.5)
    zeros = np.zeros(300)
    kwargs = dict(start=0, rows=300, reference=reference, diff=diff, ratio=zeros, judged=judged)
    rest = dict(two_sided=judged & False, over=judged & False, unjudgeable=judged & False)
    made = entries.Block(**kwargs, **rest, zero=diff == 0).rel()
    alone = entries.Block(**kwargs, **rest).rel()
    with np.errstate(divide="ignore", invalid="ignore"):
        old = np.abs(np.asarray(reference, np.float64))
        old = np.divide(diff, old, out=old)
    old[diff == 0] = 0.0
    assert made.tobytes() == alone.tobytes() == old.tobytes()
