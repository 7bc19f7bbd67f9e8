"""A screen's spot check: each screened layer's largest entries compared one by one with the oracle's.

Without it one entry wrong by 1e-4 of its value passed the screen from d = 128 (its error is below a
direction's float32 rounding), and by 1e-3 at d = 1024."""

from __future__ import annotations

import numpy as np
import planted
import pytest

import crosscheck
from backends.numpy_fd import FiniteDifferenceOracle
from crosscheck._records import Oracle
from crosscheck._workloads.protocol import Options
from crosscheck._workloads.stack.judge import spot as _spot
from crosscheck._workloads.stack.judge.answers import GradAnswer
from crosscheck._workloads.stack.judge.grad import StackGradJudge
from crosscheck._workloads.stack.oracle import fd as _fd
from crosscheck._workloads.stack.workload import Stack


def _largest_entry(dim: int) -> tuple[int, int, int]:
    """Where ``off_at_largest`` puts its error in the ``--dim dim --batch 8 --seed 0`` case."""
    weights, x = crosscheck.make_inputs(crosscheck.Case(dim=dim, batch=8, seed=0))
    g = planted.correct(weights, x)
    return tuple(int(i) for i in np.unravel_index(np.argmax(np.abs(g)), g.shape))


@pytest.mark.parametrize("dim", [128, 256])
@pytest.mark.parametrize("patterned", [False, True], ids=["float64-pattern", "own-pattern"])
def test_one_entry_wrong_by_1e_4_is_caught_and_named_where_the_screen_misses_it(dim, patterned):
    wrong = planted.off_at_largest(1e-4)
    backend = planted.Patterned(wrong) if patterned else wrong
    report = crosscheck.run(dim=dim, batch=8, seed=0, oracle_mode="screen", backends=[backend])
    (c,) = report.comparisons
    assert not report.passed and not c.passed and c.status == "mismatch"
    assert "layers checked entry by entry: none" in c.message  # every direction agreed
    assert "spot-checked: 64 entries (the 8 largest of each of 8 screened layers)" in c.coverage
    assert "\nSpot check: Mismatched elements: 1 / 64 (1.6%)\n" in c.message, c.message
    layer, row, col = _largest_entry(dim)
    assert f"Worst entry ({layer}, {row}, {col}): {c.backend} " in c.message
    assert c.worst_index == (layer, row, col) and c.mismatched == 1 and c.judged == 64


@pytest.mark.parametrize("dim", [128, 256])
def test_the_healthy_gradient_passes_its_spot_check(dim):
    both = [planted.correct, planted.Patterned(planted.correct)]
    report = crosscheck.run(dim=dim, batch=8, seed=0, oracle_mode="screen", backends=both)
    assert report.passed, [c.message for c in report.comparisons]
    for c in report.comparisons:
        assert c.coverage.endswith("spot-checked: 64 entries (the 8 largest of each of 8 screened layers)")
        assert c.judged == 64 and c.mismatched == 0


def test_one_entry_wrong_by_1e_3_is_caught_at_d_1024():
    wrong = planted.Patterned(planted.off_at_largest(1e-3))
    both = [wrong, planted.Patterned(planted.correct)]
    report = crosscheck.run(dim=1024, batch=8, seed=0, oracle_mode="screen", backends=both)
    bad, good = report.comparisons
    assert not bad.passed and good.passed, good.message
    layer, row, col = _largest_entry(1024)
    assert f"Worst entry ({layer}, {row}, {col}): " in bad.message


def test_a_layer_checked_entry_by_entry_is_not_spot_checked_again():
    # At d = 128 a wrong entry by 1e-3 fails a direction: its layer is checked entry by entry, the others
    # are spot-checked.
    wrong = planted.off_at_largest(1e-3)
    report = crosscheck.run(dim=128, batch=8, seed=0, oracle_mode="screen", backends=[wrong])
    (c,) = report.comparisons
    layer, *_ = _largest_entry(128)
    assert f"layers checked entry by entry: [{layer}]" in c.coverage
    assert "spot-checked: 56 entries (the 8 largest of each of 7 screened layers)" in c.coverage
    assert not c.passed and c.mismatched == 1


def test_the_oracle_at_single_entries_is_its_full_answer_there_bit_for_bit():
    weights, x = crosscheck.make_inputs(crosscheck.Case(layers=4, dim=12, batch=6, seed=3, init="integer"))
    full = _fd.estimate(weights, x)
    kinked = np.argwhere(full.kink)
    assert len(kinked) >= 3  # the integer case puts entries on a kink
    index = np.concatenate([[[0, 1, 2], [3, 11, 0], [1, 5, 5]], kinked[:: len(kinked) // 3][:3]])
    found = _fd.entries(weights, x, index, rounding=full.rounding)
    at = tuple(index.T)
    for name in ("value", "error", "step", "kink", "kink_at"):
        np.testing.assert_array_equal(getattr(found, name), getattr(full, name)[at], err_msg=name)
    assert found.kink[3:].all() and (found.kink_at[3:] >= 0).all()
    assert found.evaluations >= 2 * len(index)


def test_the_reference_counts_the_spot_checks_evaluations(monkeypatch):
    counted: list[int] = []
    entries, screen = _fd.entries, _fd.screen

    def counting(function):
        def counted_call(*args, **kwargs):
            out = function(*args, **kwargs)
            counted.append(out.evaluations)
            return out

        return counted_call

    monkeypatch.setattr(_fd, "entries", counting(entries))
    monkeypatch.setattr(_fd, "screen", counting(screen))
    report = crosscheck.run(dim=16, batch=4, seed=1, oracle_mode="screen", backends=[planted.correct])
    assert report.passed
    assert len(counted) >= 2 and min(counted) > 0
    assert report.backends[report.reference].notes["evaluations"] == sum(counted)


class _ScreensOnly:
    """A reference that screens but cannot answer at single entries."""

    name = "screens-only"
    output_dtype = "float64"

    def __init__(self) -> None:
        self._oracle = FiniteDifferenceOracle()

    def grad(self, weights, x):
        return self._oracle.grad(weights, x)

    def screen(self, weights, x, directions, **options):
        return self._oracle.screen(weights, x, directions, **options)


def test_a_spot_check_that_could_not_happen_fails_the_run():
    report = crosscheck.run(
        dim=16, batch=4, seed=1, oracle_mode="screen", reference=_ScreensOnly(), backends=[planted.correct]
    )
    (c,) = report.comparisons
    assert not report.passed and not c.passed and c.status == "invalid"
    assert "the reference failed to spot-check single entries: it has no `estimate_entries`" in c.message


def test_largest_leaves_out_the_entries_the_screen_left_out():
    candidate = np.arange(2 * 3 * 3, dtype=np.float32).reshape(2, 3, 3) - 9
    skip = np.zeros(candidate.shape, bool)
    skip[1, 2, 2] = True  # the largest of layer 1
    found = _spot.largest(candidate, skip, [0, 1], 2)
    assert found.tolist() == [[0, 0, 0], [0, 0, 1], [1, 2, 1], [1, 2, 0]]


def test_the_kinks_at_single_entries_are_the_full_checks_kinks_there():
    """An entry's kink judgement depends on its own tolerance alone: judged at a few entries (an
    infinite tolerance elsewhere), each is what the full check says of it, unjudgeable ones included."""
    point = Stack(layers=3, batch=4, dim=6, init="nearzero").point(dtype="float32", seed=2)
    passes = StackGradJudge(point, Options(oracle=Oracle("full"))).passes
    est = _fd.estimate(passes.weights, passes.x)
    full = GradAnswer(est.value, est.error, est.kink, est.kink_at)
    tol = passes.model("float32").grad_bound + est.error
    kinks, minor = passes.judged_kinks(tol, "float32", full)
    unjudgeable, two_sided = np.argwhere(kinks.unjudgeable), np.argwhere(np.isfinite(kinks.alternative))
    plain = np.argwhere(~kinks.unjudgeable & np.isnan(kinks.alternative))
    assert len(unjudgeable) and len(two_sided) and len(plain)
    entries = np.concatenate([unjudgeable[:3], two_sided[:3], plain[:3]])
    at = tuple(entries.T)
    threshold = np.full(tol.shape, np.inf)
    threshold[at] = tol[at]
    passes.forget_kinks("float32")
    answer = GradAnswer(est.value[at], est.error[at], est.kink[at], est.kink_at[at])
    found, found_minor = passes.judged_kinks(threshold, "float32", answer, at=entries)
    np.testing.assert_array_equal(found.unjudgeable, kinks.unjudgeable[at])
    np.testing.assert_array_equal(found.reason, kinks.reason[at])
    np.testing.assert_array_equal(found.kink, kinks.kink[at])
    np.testing.assert_array_equal(found.alternative, kinks.alternative[at])
    np.testing.assert_array_equal(found_minor, minor[at])
