"""The oracle's loss evaluations: only the rows a perturbation changes, the same differences as full ones."""

from __future__ import annotations

import numpy as np
import pytest

import crosscheck
from crosscheck._compare.constants import UNIT_ROUNDOFF
from crosscheck._workloads.stack import rounding
from crosscheck._workloads.stack.forward import forward
from crosscheck._workloads.stack.oracle import perturb

CASES = [
    crosscheck.Case(layers=4, batch=5, dim=6, dtype="float64", seed=3),
    crosscheck.Case(layers=3, batch=4, dim=5, dtype="float64", seed=4, init="integer"),
    crosscheck.Case(layers=8, batch=2, dim=3, dtype="float64", seed=5, init="nearzero"),
    crosscheck.Case(layers=3, batch=3, dim=16, dtype="float64", seed=6),  # masks compared as words
    crosscheck.Case(layers=3, batch=4, dim=10, dtype="float64", seed=8),  # flags in two 64-bit lanes
]
IDS = [f"{c.init}-d{c.dim}" for c in CASES]


def _loss(weights: np.ndarray, x: np.ndarray, masks=None) -> float:
    """A full evaluation of every row (masks held at ``masks`` when given)."""
    y = x
    for m, w in enumerate(weights):
        z = y @ w
        y = z * masks[m] if masks is not None else np.maximum(z, 0.0)
    return float(np.sum(y**2))


@pytest.mark.parametrize("case", CASES, ids=IDS)
@pytest.mark.parametrize("frozen", [False, True], ids=["relu", "frozen"])
def test_entry_differences_match_full_evaluations(case, frozen):
    weights, x = (a.astype(np.float64) for a in crosscheck.make_inputs(case))
    fwd = forward(weights, x)
    d = case.dim
    rows, cols = np.divmod(np.arange(d * d), d)
    for k in range(case.layers):
        h = np.full(d * d, 2.0**-12)
        value, error, crossed, where, _ = perturb.central(
            fwd, k, h, frozen, perturb.output_sigmas(fwd)[k], rows=rows, cols=cols
        )
        for s in range(d * d):
            plus, minus = weights.copy(), weights.copy()
            plus[k, rows[s], cols[s]] += h[s]
            minus[k, rows[s], cols[s]] -= h[s]
            masks = fwd.masks if frozen else None
            full = (_loss(plus, x, masks) - _loss(minus, x, masks)) / (2 * h[s])
            if not frozen:
                moved = [forward(w, x).masks for w in (plus, minus)]
                changed = any(np.any(a != b) for m in moved for a, b in zip(m, fwd.masks, strict=True))
                assert crossed[s] == changed, (k, s)
                if changed:
                    # The step is retried: after its first change of mask a row is not evaluated on.
                    layer, row, unit = where[s]
                    assert any(m[layer][row, unit] != fwd.masks[layer][row, unit] for m in moved)
                    continue
            assert abs(value[s] - full) <= error[s], (k, s, value[s], full, error[s])


def test_unchanged_rows_are_not_evaluated():
    # Row 1 of x is zero: no perturbation of any layer moves it, so the loss changes come from row 0
    # alone, and entries W[0][1, :] (fed by the zero input) change nothing at all.
    weights = np.array([[[1.0, -1.0], [2.0, 0.5]], [[1.0, 0.5], [-0.5, 1.0]]])
    x = np.array([[1.0, 2.0], [0.0, 0.0]])
    fwd = forward(weights, x)
    h = np.full(4, 2.0**-10)
    rows, cols = np.divmod(np.arange(4), 2)
    value, *_ = perturb.central(fwd, 0, h, False, perturb.output_sigmas(fwd)[0], rows=rows, cols=cols)
    one_row = forward(weights, x[:1])
    expected, *_ = perturb.central(
        one_row, 0, h, False, perturb.output_sigmas(one_row)[0], rows=rows, cols=cols
    )
    np.testing.assert_array_equal(value, expected)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_direction_differences_match_full_evaluations(case):
    weights, x = (a.astype(np.float64) for a in crosscheck.make_inputs(case))
    fwd = forward(weights, x)
    directions = np.random.default_rng(0).choice([-1.0, 1.0], size=(3, case.dim, case.dim))
    for k in range(case.layers):
        h = np.full(3, 2.0**-14)
        moved = fwd.ys[k] @ directions
        value, error, crossed, *_ = perturb.central(
            fwd, k, h, False, perturb.output_sigmas(fwd)[k], moved=moved
        )
        for s in range(3):
            plus, minus = weights.copy(), weights.copy()
            plus[k] += h[s] * directions[s]
            minus[k] -= h[s] * directions[s]
            moved_masks = [forward(w, x).masks for w in (plus, minus)]
            changed = any(np.any(a != b) for m in moved_masks for a, b in zip(m, fwd.masks, strict=True))
            assert crossed[s] == changed, (k, s)
            if not changed:  # a crossed step is retried, not evaluated on
                full = (_loss(plus, x) - _loss(minus, x)) / (2 * h[s])
                assert abs(value[s] - full) <= error[s], (k, s, value[s], full, error[s])


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_output_sigmas_equal_the_forward_propagation_from_each_layer(case):
    fwd = forward(*crosscheck.make_inputs(case))
    u = UNIT_ROUNDOFF["float64"]
    expected = []
    for k in range(case.layers):
        var = np.zeros_like(fwd.zs[0])
        for m in range(k, case.layers):
            var = var @ fwd.weights[m] ** 2 if m > k else var
            var = (var + rounding.fresh_sigma(fwd.ys[m], fwd.weights[m], u, False) ** 2) * fwd.masks[m]
        expected.append(np.sqrt(np.sum(var)))
    np.testing.assert_allclose(perturb.output_sigmas(fwd), expected, rtol=1e-12)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_paths_made_per_call_give_the_cached_paths_answer(case, monkeypatch):
    # Above _PATH_CACHE_BYTES each call makes its rows' paths: reduced for many rows (the same products:
    # the same bits), plain for a few (products over every unit, the off ones zeroed: the same sums to
    # within rounding, the same crossings).
    weights, x = (a.astype(np.float64) for a in crosscheck.make_inputs(case))
    rows, cols = np.divmod(np.arange(case.dim**2), case.dim)
    h = np.full(case.dim**2, 2.0**-12)
    directions = np.random.default_rng(1).choice([-1.0, 1.0], size=(2, case.dim, case.dim))
    answers = {}
    for mode, limit, min_rows in (
        ("cached", perturb._PATH_CACHE_BYTES, 0),
        ("reduced", 0, 0),
        ("plain", 0, 10**9),
    ):
        monkeypatch.setattr(perturb, "_PATH_CACHE_BYTES", limit)
        monkeypatch.setattr(perturb, "_PATH_MIN_ROWS", min_rows)
        fwd = forward(weights, x)
        sigmas = perturb.output_sigmas(fwd)
        results = [
            perturb.central(fwd, k, h, False, sigmas[k], rows=rows, cols=cols) for k in range(case.layers)
        ]
        results += [
            perturb.central(fwd, k, h, True, sigmas[k], rows=rows, cols=cols) for k in range(case.layers)
        ]
        results += [
            perturb.central(fwd, k, h[:2], False, sigmas[k], moved=fwd.ys[k] @ directions)
            for k in range(case.layers)
        ]
        answers[mode] = results
        assert ("_paths" in fwd.__dict__) == (mode == "cached")
    for cached, reduced, plain in zip(answers["cached"], answers["reduced"], answers["plain"], strict=True):
        for a, b in zip(cached, reduced, strict=True):
            np.testing.assert_array_equal(a, b)
        value, error, crossed, where, fraction = cached
        np.testing.assert_array_equal(plain[2], crossed)
        np.testing.assert_array_equal(plain[3], where)
        ok = ~crossed
        assert np.all(np.abs(plain[0][ok] - value[ok]) <= np.minimum(plain[1][ok], error[ok]))
        np.testing.assert_allclose(plain[4], fraction, rtol=1e-9)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_blocks_of_any_size_give_the_same_answer(case, monkeypatch):
    # A batch row's rows are propagated in equal blocks of at most block_rows(d) rows: one row a block,
    # uneven sizes and one block for all must give the same crossings and, to within the error bars,
    # the same differences (BLAS may sum a product of another shape in another order).
    weights, x = (a.astype(np.float64) for a in crosscheck.make_inputs(case))
    rows, cols = np.divmod(np.arange(case.dim**2), case.dim)
    h = np.full(case.dim**2, 2.0**-10)
    answers = []
    for block in (10**9, 1, 3, 7):
        monkeypatch.setattr(perturb, "_CHUNK_ROWS", block)
        assert perturb.block_rows(case.dim) == min(block, perturb._CHUNK_VALUES // case.dim)
        fwd = forward(weights, x)
        sigmas = perturb.output_sigmas(fwd)
        answers.append(
            [perturb.central(fwd, k, h, False, sigmas[k], rows=rows, cols=cols) for k in range(case.layers)]
        )
    for results in answers[1:]:
        for (value, error, crossed, where, fraction), first in zip(results, answers[0], strict=True):
            np.testing.assert_array_equal(crossed, first[2])
            np.testing.assert_array_equal(where, first[3])
            np.testing.assert_allclose(fraction, first[4], rtol=1e-9)
            ok = ~crossed
            assert np.all(np.abs(value[ok] - first[0][ok]) <= np.minimum(error[ok], first[1][ok]))
