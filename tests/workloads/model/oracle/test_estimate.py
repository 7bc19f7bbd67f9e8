"""The model oracle's cost is estimated before it runs (``_workloads/model/oracle/estimate.py``) and said on
the command line before a long run: 2 000 one-element tensors, screened, took 400 s with nothing printed."""

from __future__ import annotations

import numpy as np
import pytest

import crosscheck
from crosscheck._cli.run import _cost_note
from crosscheck._engine.plan import Outlook, plan
from crosscheck._engine.request import Request
from crosscheck._records import Oracle
from crosscheck._workloads.registry import load_workload


def _planned(n: int, reference: str = "numpy-fd", mode: str = "auto"):
    """The plan of a workload of ``n`` one-element tensors, with one candidate (its gradient)."""
    names = [f"w{i}" for i in range(n)]

    def loss(p, i):
        return float(sum(np.sum(p[k] * i["x"]) ** 2 for k in names))

    def grad(p, i):
        return {k: 2 * np.sum(p[k] * i["x"]) * i["x"] for k in names}

    workload = crosscheck.Workload(
        name="many", parameters={k: (1,) for k in names}, inputs={"x": (1,)}, reference=loss
    )
    request = Request(backends=[grad], reference=reference, dtype="float64", seed=0, oracle=Oracle(mode))
    return plan(load_workload(workload), request)


def test_a_long_oracle_run_says_its_estimate_before_it_starts(capsys):
    planned = _planned(20000, mode="full")
    cost = planned.judge.cost(len(planned.candidates))
    # Entry by entry: EVALUATIONS_PER_ENTRY (8) per entry, for the NumPy reference and the candidate's loss.
    assert (cost.tensors, cost.entries, cost.mode) == (20000, 20000, "full")
    assert (cost.evaluations, cost.functions) == (8 * 20000, 2)
    _cost_note(Outlook.of(planned))
    err = capsys.readouterr().err
    assert err.startswith("crosscheck: the oracle differences 20000 tensors (20000 entries) entry by entry")
    assert "about 160,000 loss evaluations for each of 2 functions, roughly " in err


def test_screening_costs_the_same_whatever_the_number_of_tensors():
    # Screening is one group of every tensor: 4 directions of 8 evaluations, whatever the number of
    # tensors (halved groups come on top only where a direction disagrees); auto screens 2 000
    # one-element tensors, the case that took 400 s, where entry by entry would cost 16 000.
    for n in (50, 2000):
        assert _planned(n, mode="screen").judge.cost(1).evaluations == 8 * 4
    assert _planned(2000).judge.cost(1).mode == "screen"


def test_a_short_run_or_one_without_the_oracle_says_nothing(capsys):
    _cost_note(Outlook.of(_planned(3)))
    _cost_note(Outlook.of(_planned(2000, reference="numpy-fd-none")))  # not the oracle: no estimate
    assert capsys.readouterr().err == ""


def test_the_estimate_times_a_warm_evaluation_not_the_first_one(monkeypatch, capsys):
    # The first call of a reference pays its imports (`from scipy.special import erf`: 0.6 s at load 14),
    # which made a 23 s run of examples.gelu_port announce "roughly 12 min". A fake clock, no sleeping:
    # the reference's first call takes "600 s", every later one "1 ms".
    import time

    clock, calls = [0.0], []
    monkeypatch.setattr(time, "perf_counter", lambda: clock[0])

    def loss(p, i):
        calls.append(1)
        clock[0] += 600.0 if len(calls) == 1 else 0.001
        return float(np.sum(p["w"] * i["x"]) ** 2)

    workload = crosscheck.Workload(name="imports", parameters={"w": (3,)}, inputs={"x": (3,)}, reference=loss)
    backends = [lambda p, i: {"w": 2 * np.sum(p["w"] * i["x"]) * i["x"]}]
    request = Request(backends=backends, reference="numpy-fd", dtype="float64", seed=0, oracle=Oracle("full"))
    planned = plan(load_workload(workload), request)
    cost = planned.judge.cost(len(planned.candidates))
    assert len(calls) == 2  # the check at the point, then the timed one
    assert cost.seconds == pytest.approx(0.001 * cost.evaluations * cost.functions)
    _cost_note(Outlook.of(planned))
    assert capsys.readouterr().err == ""  # a short run says nothing
