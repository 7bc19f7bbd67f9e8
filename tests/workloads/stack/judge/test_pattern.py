"""A float32 candidate judged on its own ReLU pattern: where float32 rounding flips a ReLU, every entry is
compared with the exact gradient of the piece the candidate took (its activations show which), and the
planted bugs are still caught there."""

from __future__ import annotations

import dataclasses

import numpy as np
import planted
import pytest
from exact import as_float, exact_gradient

import crosscheck
from crosscheck._compare.record import Comparison
from crosscheck._workloads.stack import pattern as _pattern
from crosscheck._workloads.stack import rounding
from crosscheck._workloads.stack.forward import backward, forward
from crosscheck._workloads.stack.judge.answers import GradAnswer
from crosscheck._workloads.stack.judge.passes import Passes
from crosscheck._workloads.stack.judge.pattern import View, noted
from crosscheck._workloads.stack.judge.screening import Screening

#: float32 rounding flips one ReLU of this case (unit (0, 1, 4)) in ``planted``'s arithmetic.
CASE = crosscheck.Case(layers=8, batch=4, dim=6, seed=0, dtype="float32", init="nearzero")


def _flipped_case():
    weights, x = crosscheck.make_inputs(CASE)
    fwd = forward(weights, x)
    masks = list(planted.activations(weights, x) > 0)
    pattern = _pattern.held(fwd, backward(fwd, grads=False)[0], masks)
    assert len(pattern.flipped), "the case must flip a ReLU in float32"
    return weights, x, masks, pattern


def _run(*backends, **options):
    report = crosscheck.run(**CASE.to_dict(), backends=list(backends), **options)
    return report, {c.backend: c for c in report.comparisons}


def _moved(weights, x, masks):
    """The entries the flip moves, exactly: the gradient on the candidate's piece less float64's."""
    return as_float(exact_gradient(weights, x, masks)) - as_float(exact_gradient(weights, x))


def test_the_reference_on_the_candidates_pattern_is_the_exact_gradient_of_that_piece():
    weights, x, masks, pattern = _flipped_case()
    exact = as_float(exact_gradient(weights, x, masks))
    est = crosscheck.load_backend("numpy-fd").estimate(weights, x)
    held = Passes.of(weights, x).held(pattern).answer(GradAnswer(est.value, est.error, est.kink, est.kink_at))
    judged = ~est.kink
    assert judged.mean() > 0.9
    assert np.all(np.abs(held.value - exact)[judged] <= held.error[judged])
    # The flip matters: many entries of the piece differ from float64's by more than the bars.
    assert np.sum(np.abs(_moved(weights, x, masks)) > 10 * held.error) > 10


@pytest.mark.parametrize("oracle_mode", ["full", "screen"])
def test_every_entry_of_a_flipped_case_is_judged_and_a_correct_candidate_passes(oracle_mode):
    _, comparisons = _run(planted.Patterned(planted.correct), planted.correct, oracle_mode=oracle_mode)
    held, plain = comparisons["patterned_correct"], comparisons["correct"]
    assert held.passed and held.unjudgeable == 0
    assert held.judged == held.total or oracle_mode == "screen"  # a screen judges directions
    assert "judged on its own ReLU pattern: 1 units differ from float64's" in held.coverage
    assert "(0, 1, 4)" in held.message
    assert plain.passed and plain.unjudgeable > 0  # no activations: judged on float64's pattern


def _exact_on(masks):
    def grad(weights, x):
        return as_float(exact_gradient(weights, x, masks)).astype(np.float32)

    return grad


def test_the_candidate_is_held_to_the_piece_its_activations_show():
    weights, x, masks, _ = _flipped_case()
    float64_masks = list(forward(weights, x).masks)
    own, other = _exact_on(masks), _exact_on(float64_masks)
    other.__name__ = "other"
    _, comparisons = _run(planted.Patterned(own), planted.Patterned(other))
    assert comparisons["patterned_grad"].passed
    wrong = comparisons["patterned_other"]  # float64's piece while its forward took the other
    assert not wrong.passed and wrong.mismatched > 0


def _off_at(index, rel=1e-4):
    def grad(weights, x):
        g = planted.correct(weights, x)
        g[index] = g[index] * (1 + rel)
        return g

    return grad


@pytest.mark.parametrize("oracle_mode", ["full", "screen"])
def test_a_1e_4_error_where_the_flip_moves_the_gradient_is_caught(oracle_mode):
    weights, x, masks, _ = _flipped_case()
    # The largest entry the flip moves (a screen sees 1e-4 of a layer's large entries): unjudgeable
    # on float64's pattern.
    moved = np.abs(_moved(weights, x, masks)) > 0
    size = np.abs(planted.correct(weights, x)) * moved
    index = np.unravel_index(np.argmax(size), size.shape)
    plain, held = _off_at(index), planted.Patterned(_off_at(index))
    plain.__name__ = "plain"
    _, comparisons = _run(held, plain, oracle_mode=oracle_mode)
    assert not comparisons[held.name].passed
    if oracle_mode == "full":
        assert comparisons[held.name].worst_index == tuple(int(i) for i in index)
        assert comparisons["plain"].passed and comparisons["plain"].unjudgeable > 0


BUGS = [
    (planted.off_at_largest(1e-4), "nearzero"),
    (planted.off_at_largest(1e-4), "integer"),
    (planted.relu_derivative_one_at_zero, "integer"),  # exact zeros: the kink case
    (planted.no_last_relu, "nearzero"),
]


@pytest.mark.parametrize(("bug", "init"), BUGS, ids=[f"{b.__name__}-{i}" for b, i in BUGS])
def test_planted_bugs_are_still_caught_on_the_candidates_pattern(bug, init):
    case = {**CASE.to_dict(), "init": init, "batch": 6, "seed": 5}
    report = crosscheck.run(**case, backends=[planted.Patterned(bug)])
    (comparison,) = report.comparisons
    assert not report.passed and comparison.mismatched > 0


def test_a_pattern_beyond_rounding_is_judged_on_float64s_pattern_and_said():
    def shown(activations):
        activations = activations.copy()
        activations[0, 0] = 0.0  # a whole row of layer 0 shown off: far from any kink
        return activations

    _, comparisons = _run(planted.Patterned(planted.correct, shown))
    (comparison,) = comparisons.values()
    assert "its ReLU pattern differs from float64's beyond float32 rounding" in comparison.coverage
    assert "judged on float64's pattern" in comparison.message
    assert comparison.unjudgeable > 0  # today's judgement, with its unjudgeable entries


def test_activations_of_the_wrong_shape_are_said_and_judged_on_float64s_pattern():
    _, comparisons = _run(planted.Patterned(planted.correct, lambda a: a[:, :2]))
    (comparison,) = comparisons.values()
    assert comparison.passed
    assert "judged on float64's ReLU pattern (its activations have shape (8, 2, 6)" in comparison.coverage


def test_candidates_on_float64s_pattern_share_its_rounding_model(monkeypatch):
    made = []
    real = rounding.rounding_model
    monkeypatch.setattr(rounding, "rounding_model", lambda *a, **k: made.append(a[2]) or real(*a, **k))
    first, second = planted.Patterned(planted.correct), planted.Patterned(planted.correct)
    second.name = "again"
    report = crosscheck.run(layers=4, batch=4, dim=8, seed=1, backends=[first, second])
    assert report.passed and all(c.unjudgeable == 0 for c in report.comparisons)
    assert made.count("float32") == 1


def test_activations_that_raise_are_said_and_the_gradient_judged_on_float64s_pattern():
    def shown(activations):
        raise RuntimeError("no forward here")

    report, comparisons = _run(planted.Patterned(planted.correct, shown))
    (comparison,) = comparisons.values()
    assert report.passed and comparison.unjudgeable > 0  # judged, as without activations
    assert "judged on float64's ReLU pattern (" in comparison.coverage
    assert "no forward here" in comparison.coverage


def test_a_view_says_its_pattern_and_a_held_ones_screens_are_counted_once():
    weights, x, _, pattern = _flipped_case()
    passes = Passes.of(weights, x)
    screening = Screening(estimate=None, oracle=None, more_evaluations=3)
    own = dataclasses.replace(screening, more_evaluations=7)  # a held view's copy, screened again
    comparison = Comparison(backend="mine", reference="numpy-fd", passed=True, status="ok", total=1)
    comparison = dataclasses.replace(comparison, coverage="every entry", message="all good")
    held = noted(
        comparison, View(passes.held(pattern), own, "; judged on its own ReLU pattern: ..."), screening
    )
    assert screening.more_evaluations == 7
    assert held.coverage == "every entry; judged on its own ReLU pattern: ..."
    assert held.message == "all good\njudged on its own ReLU pattern: ..."
    screening.more_evaluations = 3
    plain = noted(comparison, View(passes, own, ""), screening)
    assert plain is comparison and screening.more_evaluations == 3  # not held: its screens are its own
    bare = dataclasses.replace(comparison, message="")
    said = noted(bare, View(passes, screening, "; judged on float64's ReLU pattern (why)"), screening)
    assert said.message == "judged on float64's ReLU pattern (why)"
