"""Screening costs what the directions cost (issue 38, the stack's cliff): entries that several ReLU
flips may move are left out of the directions and said to be unjudgeable, never a reason to check
their layer entry by entry (``d**2`` perturbed evaluations a layer, each ``O(N d**2)``: the ``d**4``
that made ``--dim 1280`` run for hours)."""

from __future__ import annotations

import numpy as np
import planted
import pytest

import crosscheck
from crosscheck._records import Oracle
from crosscheck._workloads.protocol import Options
from crosscheck._workloads.stack.judge import cost
from crosscheck._workloads.stack.judge.grad import StackGradJudge
from crosscheck._workloads.stack.oracle import fd as _fd
from crosscheck._workloads.stack.workload import Stack

#: Near-zero inputs: float32 rounding may flip several ReLUs for most entries of every layer, and
#: one flip for a few (``_unjudgeable`` counts them).
CASE = {"layers": 3, "batch": 4, "dim": 6, "init": "nearzero", "seed": 2}


def _unjudgeable(dtype: str = "float32") -> np.ndarray:
    knobs = {k: v for k, v in CASE.items() if k != "seed"}
    point = Stack(**knobs).point(dtype=dtype, seed=CASE["seed"])
    passes = StackGradJudge(point, Options(oracle=Oracle("screen"))).passes
    *_, effects = passes.kink_effects(dtype, passes.model(dtype).grad_bound)
    return effects.count > 1


def _spotted() -> int:
    """How many entries the spot check compares: the 8 largest of each layer, of those judgeable (a
    layer of this case has fewer)."""
    judgeable = (~_unjudgeable()).sum(axis=(1, 2))
    assert judgeable.min() < 8
    return int(np.minimum(judgeable, 8).sum())


@pytest.fixture
def entry_by_entry(monkeypatch):
    """The layers the oracle checked entry by entry (each call's ``layers``)."""
    calls: list[list[int]] = []
    estimate = _fd.estimate

    def counted(weights, x, *, layers=None, progress=None):
        calls.append(sorted(layers) if layers is not None else list(range(len(weights))))
        return estimate(weights, x, layers=layers, progress=progress)

    monkeypatch.setattr(_fd, "estimate", counted)
    return calls


def test_the_case_has_entries_several_flips_may_move_in_every_layer():
    several = _unjudgeable()
    assert several.any(axis=(1, 2)).all() and not several.all(), several.sum(axis=(1, 2))


def test_entries_several_flips_may_move_are_unjudgeable_not_checked_entry_by_entry(entry_by_entry):
    report = crosscheck.run(**CASE, oracle_mode="screen", backends=[planted.correct])
    assert report.passed, report.problems
    assert entry_by_entry == []  # no layer's every entry: the cost of the directions only
    (c,) = report.comparisons
    several = int(_unjudgeable().sum())
    assert c.unjudgeable == several
    assert c.unjudgeable_reasons == {"float32 rounding may flip several ReLUs": several}
    assert "layers checked entry by entry: none" in c.message
    assert f"{several} entries left out of the directions, unjudgeable" in c.message


def test_strict_fails_them_as_the_full_check_does(entry_by_entry):
    report = crosscheck.run(**CASE, oracle_mode="screen", strict=True, backends=[planted.correct])
    (c,) = report.comparisons
    assert not report.passed and not c.passed
    assert "--strict fails them" in c.message
    full = crosscheck.run(**CASE, oracle_mode="full", strict=True, backends=[planted.correct])
    assert not full.passed


@pytest.mark.parametrize("bug", ["mean_not_sum", "transposed", "no_last_relu"])
def test_a_wrong_gradient_still_fails_where_entries_are_left_out(bug):
    report = crosscheck.run(**CASE, oracle_mode="screen", backends=[getattr(planted, bug)])
    (c,) = report.comparisons
    assert not report.passed and c.status == "mismatch", c.message


def test_a_wrong_judgeable_entry_is_found():
    judgeable = np.argwhere(~_unjudgeable())
    layer, row, col = (int(i) for i in judgeable[len(judgeable) // 2])

    def off(weights, x):
        g = planted.correct(weights, x)
        g[layer, row, col] += 0.25 * (abs(g[layer, row, col]) + np.abs(g).max())
        return g

    report = crosscheck.run(**CASE, oracle_mode="screen", backends=[off])
    (c,) = report.comparisons
    assert not report.passed, c.message
    assert f"layers checked entry by entry: [{layer}]" in c.message


def test_above_the_escalation_limit_a_disagreeing_direction_fails_without_checking_entries(
    entry_by_entry, monkeypatch
):
    monkeypatch.setattr(cost, "ESCALATE_FLOPS", 0.0)
    report = crosscheck.run(**CASE, oracle_mode="screen", backends=[planted.mean_not_sum])
    (c,) = report.comparisons
    assert not report.passed and not c.passed and c.status == "mismatch"
    assert entry_by_entry == []
    assert "layers checked entry by entry: none; " in c.message
    assert (
        "entries left out of the directions, unjudgeable (float32 rounding may flip several ReLUs); "
        f"spot-checked: {_spotted()} entries (up to the 8 largest of each of 3 screened layers); "
        "the directions of layers [" in c.message
    )
    assert "so the candidate fails on its directions; --oracle-mode full checks every entry" in c.message
    assert not any(row["full_check"] for row in c.screening)
    # A healthy candidate is unaffected: every direction agrees.
    assert crosscheck.run(**CASE, oracle_mode="screen", backends=[planted.correct]).passed


@pytest.mark.parametrize(("dim", "escalates"), [(128, True), (500, True), (512, False), (4096, False)])
def test_a_screen_escalates_where_a_layers_every_entry_is_affordable(dim, escalates):
    assert cost.escalates(8, 8, dim) is escalates
    # The costliest layer is the first: every layer after it is evaluated again for each entry.
    assert cost.escalation_flops(8, 8, dim, [0]) == 4 * 8 * dim**4 * 7


def test_the_reference_counts_every_screens_evaluations_and_the_coverage_the_left_out_entries(
    monkeypatch,
):
    """The oracle screens twice here (its directions, then those less the unjudgeable entries) and
    spot-checks single entries once: the reference's ``evaluations`` note counts all three, and the
    coverage says what was left out."""
    counted: dict[str, list[int]] = {"screen": [], "entries": []}

    def counting(name):
        function = getattr(_fd, name)

        def counted_call(*args, **kwargs):
            out = function(*args, **kwargs)
            counted[name].append(out.evaluations)
            return out

        return counted_call

    for name in counted:
        monkeypatch.setattr(_fd, name, counting(name))
    report = crosscheck.run(**CASE, oracle_mode="screen", backends=[planted.correct])
    assert report.passed, report.problems
    screens, spots = counted["screen"], counted["entries"]
    assert len(screens) == 2 and min(screens) > 0  # the directions, then the judgeable entries
    assert len(spots) == 1 and spots[0] >= 2 * _spotted()  # each layer's 8 largest judged entries
    assert report.backends[report.reference].notes["evaluations"] == sum(screens) + sum(spots)
    (c,) = report.comparisons
    several = int(_unjudgeable().sum())
    assert c.coverage.endswith(
        f"; {several} entries left out of the directions, unjudgeable "
        f"(float32 rounding may flip several ReLUs); spot-checked: {_spotted()} entries (up to the 8 "
        "largest of each of 3 screened layers)"
    ), c.coverage
