"""The stack's gradient judge does no work twice: one rounding model per precision, kinks once per dtype."""

from __future__ import annotations

import planted
import pytest

import crosscheck
from crosscheck._workloads.stack import kinks as _kinks
from crosscheck._workloads.stack import rounding


@pytest.fixture
def counted(monkeypatch):
    """Counts of the rounding models made (by dtype) and of the kink judgements."""
    calls: dict[str, int] = {}
    models, effects = rounding.rounding_model, _kinks.kink_effects

    def rounding_model(fwd, deltas, dtype, **kwargs):
        calls[dtype] = calls.get(dtype, 0) + 1
        return models(fwd, deltas, dtype, **kwargs)

    def kink_effects(*args, **kwargs):
        calls["kink_effects"] = calls.get("kink_effects", 0) + 1
        return effects(*args, **kwargs)

    monkeypatch.setattr(rounding, "rounding_model", rounding_model)
    monkeypatch.setattr(_kinks, "kink_effects", kink_effects)
    return calls


@pytest.mark.parametrize("mode", ["full", "screen"])
def test_one_model_per_precision_and_kinks_once_for_every_candidate(counted, mode):
    two_candidates = [planted.correct, planted.off_at_largest(0.0)]
    report = crosscheck.run(layers=4, batch=3, dim=6, oracle_mode=mode, backends=two_candidates)
    assert report.passed, report.problems
    # The oracle's float64 model serves the judge too; the candidates' float32 model is made once. A
    # screen judges kinks once for its directions and once for its spot check's entries (the same
    # entries, with the same tolerances, for both candidates here).
    kinks = 2 if mode == "screen" else 1
    assert counted == {"float64": 1, "float32": 1, "kink_effects": kinks}


def test_a_float64_case_needs_a_single_model(counted):
    report = crosscheck.run(layers=4, batch=3, dim=6, dtype="float64", backends=[planted.correct])
    assert report.passed, report.problems
    assert counted == {"float64": 1, "kink_effects": 1}
