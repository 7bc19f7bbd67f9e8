"""The budget (``oracle.budget``) is the check's wall time: the work around the oracle counts against it.

On a fake clock (``protocol.now``) the small model below takes ``GENERATE`` seconds to make its arrays (as
a port's captures take before the oracle starts), ``GRADIENT`` a gradient (the candidate's, its re-runs)
and ``EVALUATION`` a call of its float64 loss by the oracle, so that a check's seconds are known without
sleeping. Before, only the oracle's own seconds counted, and a check given a budget ran far past it.
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

import crosscheck
from crosscheck._workloads import protocol
from crosscheck._workloads.model.oracle.budget import RESERVE_SHARE, Clock, line
from crosscheck._workloads.model.oracle.entries import OracleFailed

needs = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="the small model needs torch")

#: Fake seconds of making the arrays, of one gradient (autograd on) and of one loss call by the oracle
#: (a batch of points, or one).
GENERATE, GRADIENT, EVALUATION = 60.0, 10.0, 5.0


class FakeClock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _slow(clock: FakeClock) -> crosscheck.Workload:
    def loss(p, i):
        import torch

        clock.t += GRADIENT if torch.is_grad_enabled() else EVALUATION
        return (torch.tanh(i["x"] @ p["w"] + p["b"]) ** 2).sum()

    def generate(rng, dtype):
        clock.t += GENERATE
        params = {"w": rng.normal(size=(5, 6)), "b": rng.normal(size=(6,))}
        inputs = {"x": rng.normal(size=(3, 5))}
        return (
            {k: v.astype(dtype) for k, v in params.items()},
            {k: v.astype(dtype) for k, v in inputs.items()},
        )

    return crosscheck.Workload(
        name="slow-tanh-layer",
        parameters={"w": (5, 6), "b": (6,)},
        inputs={"x": (3, 5)},
        implementations={"torch": loss},
        generate=generate,
    )


def _run(monkeypatch, budget: float | None) -> tuple[crosscheck.Report, float]:
    clock = FakeClock()
    monkeypatch.setattr(protocol, "now", clock)
    start = clock.t
    report = crosscheck.run(workload=_slow(clock), seed=1, budget=budget, isolate=False)
    return report, clock.t - start


@needs
def test_without_a_budget_to_keep_to_the_check_takes_this_long(monkeypatch):
    report, seconds = _run(monkeypatch, budget=1e6)
    assert report.passed, report.problems
    budget = report.oracle["budget"]
    assert not budget["ran_out"]
    assert budget["other"] >= 2 * GRADIENT  # the candidate's gradient and its re-run for rounding
    assert budget["wall"] == pytest.approx(seconds)


@needs
def test_the_work_outside_the_oracle_counts_and_the_check_ends_within_its_budget(monkeypatch):
    _, whole = _run(monkeypatch, budget=1e6)
    given = whole / 2
    report, seconds = _run(monkeypatch, budget=given)
    assert not report.passed  # a check that did not happen fails, never passes
    budget = report.oracle["budget"]
    assert budget["ran_out"] and budget["spent"] < given - GENERATE  # the oracle had what was left
    assert budget["other"] > 0 and budget["judged"] < budget["parameters"]
    # within the budget plus one batch of the oracle's (here one loss call)
    assert seconds <= given + EVALUATION, (seconds, given)
    said = [p for p in report.problems if "ran out" in p]
    assert said and all(
        "outside the oracle, and " in p and "kept back for the work after it" in p for p in said
    )
    finish = budget["to_finish"]
    assert finish["evaluations"] > 0 and finish["budget"] > given
    text = line(budget)
    assert "in the check's other work (the budget counts both)" in text
    assert f"(--budget {finish['budget']:g} or more)" in text


def test_a_clock_refuses_a_batch_once_the_check_and_its_reserve_reach_the_budget(monkeypatch):
    now = FakeClock()
    monkeypatch.setattr(protocol, "now", now)
    clock = Clock.given(100.0, started=now.t)
    now.t += 100 - RESERVE_SHARE * 100 - 1  # the reserve is capped at its share of the budget
    clock.check()  # one second is left
    evaluated = clock.guard(lambda thunk: thunk(), "f")(lambda: np.zeros(3))
    assert evaluated.shape == (3,) and clock.evaluations == 3
    now.t += 1
    with pytest.raises(OracleFailed, match="budget of 100 s ran out"):
        clock.check()
    now.t -= 50  # once refused, always: a check never judges a part after it said it would not
    with pytest.raises(OracleFailed):
        clock.check()
    assert clock.ran_out and clock.stopped == (100 - RESERVE_SHARE * 100, 100 - RESERVE_SHARE * 100)


def test_the_reserve_is_what_the_other_work_took_so_far(monkeypatch):
    now = FakeClock()
    monkeypatch.setattr(protocol, "now", now)
    clock = Clock.given(100.0, started=now.t)
    now.t += 10  # ten seconds of other work: ten kept back
    clock.seconds = 0.0
    assert clock.spent() == pytest.approx(20.0)
    clock.seconds, now.t = 60.0, now.t + 60  # the oracle's sixty: nothing more kept back
    assert clock.spent() == pytest.approx(80.0)


def test_a_clock_without_a_start_counts_the_oracles_own_seconds(monkeypatch):
    now = FakeClock()
    monkeypatch.setattr(protocol, "now", now)
    clock = Clock.given(10.0)
    now.t += 1e6
    clock.check()  # an oracle used outside a check: its own seconds only
    assert clock.spent() == 0.0 and "wall" not in clock.summary(0, 1)
