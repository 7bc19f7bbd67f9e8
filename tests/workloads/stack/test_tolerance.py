"""The tolerance model, measured: no false alarm on many random cases, planted 1e-3 and 1e-4 errors caught.

One process, one run per case: the oracle runs once per case and JAX reuses compiled functions across
cases of the same shape (the shapes come from a short list).
"""

from __future__ import annotations

import numpy as np
import planted
import pytest

import crosscheck

SHAPES = [
    (1, 1, 1),
    (3, 2, 2),
    (8, 1, 3),
    (8, 4, 5),
    (8, 8, 8),
    (8, 32, 16),
    (3, 8, 32),
    (8, 8, 64),
    (8, 32, 64),
]
INITS = ["gaussian", "gaussian", "integer", "nearzero", "identity"]
SCALES = [1.0, 1.0, 1e-3, 1e3, 3.7]


def _cases(count: int = 60) -> list[crosscheck.Case]:
    rng = np.random.default_rng(2026)
    cases = []
    for seed in range(count):
        layers, batch, dim = SHAPES[seed % len(SHAPES)]
        cases.append(
            crosscheck.Case(
                layers=layers,
                batch=batch,
                dim=dim,
                seed=seed,
                dtype=["float32", "float64"][int(rng.integers(2))],
                init=INITS[int(rng.integers(len(INITS)))],
                scale=SCALES[int(rng.integers(len(SCALES)))],
            )
        )
    return cases


CASES = _cases()
OFF_1E3, OFF_1E4 = planted.off_at_largest(1e-3), planted.off_at_largest(1e-4)


def _available(names):
    out = []
    for name in names:
        try:
            crosscheck.load_backend(name)
        except crosscheck.BackendUnavailable:
            continue
        out.append(name)
    return out


@pytest.fixture(scope="module")
def reports():
    backends = [*_available(["jax", "torch"]), planted.correct, OFF_1E3, OFF_1E4]
    return [(case, crosscheck.run(**case.to_dict(), backends=backends)) for case in CASES]


def _by_name(report):
    return {c.backend: c for c in report.comparisons}


def test_suite_covers_the_promised_ground():
    dims = {c.dim for c in CASES}
    assert min(dims) == 1 and max(dims) == 64
    assert {c.batch for c in CASES} >= {1, 32}
    assert {c.init for c in CASES} == {"gaussian", "integer", "nearzero", "identity"}
    assert {c.dtype for c in CASES} == {"float32", "float64"}
    assert len({c.scale for c in CASES}) >= 3


def test_zero_false_alarms(reports):
    alarms = [
        f"{case}: {c.backend}: {c.message}"
        for case, report in reports
        for c in report.comparisons
        if c.backend in ("jax", "torch", "correct") and not c.passed
    ]
    assert not alarms, "\n".join(alarms)


def test_kink_heavy_cases_are_counted_not_failed(reports):
    near = [
        _by_name(r)["correct"] for case, r in reports if case.init == "nearzero" and case.dtype == "float32"
    ]
    assert near and all(c.passed for c in near)
    assert sum(c.unjudgeable + c.two_sided for c in near) > 0


@pytest.mark.parametrize(
    ("bug", "dtype"),
    [(OFF_1E3, "float32"), (OFF_1E4, "float32"), (OFF_1E3, "float64")],
    ids=["1e-3-float32", "1e-4-float32", "1e-3-float64"],
)
def test_error_at_the_largest_entry_is_caught(reports, bug, dtype):
    missed, unjudged, dead, live = [], [], 0, 0
    for case, report in reports:
        if case.dtype != dtype:
            continue
        if not np.any(planted.correct(*crosscheck.make_inputs(case))):
            dead += 1  # every unit dead: the gradient is all zeros and no error can be planted
            continue
        live += 1
        comparison = _by_name(report)[bug.__name__]
        if comparison.passed:
            (unjudged if comparison.unjudgeable else missed).append(case)
    if dtype == "float64":
        # Near-zero pre-activations force the oracle to tiny steps: its error bar, not the candidate's
        # rounding, then limits what a float64 comparison can see.
        missed = [case for case in missed if case.init != "nearzero"]
    assert not missed, "\n".join(map(str, missed))
    assert live >= 15, f"only {live} cases with a non-zero gradient ({dead} dead)"
    # An unjudgeable largest entry happens only where zero pre-activations are built in: near-zero
    # cases, and integer cases whose scaling makes float32 miss exact zeros.
    assert all(case.init in ("nearzero", "integer") for case in unjudged), unjudged


def test_secondary_flips_in_a_near_zero_case_are_not_false_alarms():
    # Here float32 flips unit (2, 5, 14), whose new value flips (3, 5, 15), which no rounding bound
    # flags by itself: without activations the row's possible flips are bounded together, forward and
    # backward; a backend that shows its activations is judged on the pattern it took, both flips in it.
    backends = [*_available(["jax", "torch"]), planted.correct]
    report = crosscheck.run(init="nearzero", backends=backends)
    assert report.passed, report.problems
    by_name = _by_name(report)
    assert by_name["correct"].unjudgeable > 0
    for name in _available(["jax", "torch"]):
        assert by_name[name].unjudgeable == 0 and by_name[name].judged == by_name[name].total
        assert "judged on its own ReLU pattern" in by_name[name].coverage
    if "torch" in by_name:
        assert "(2, 5, 14), (3, 5, 15)" in by_name["torch"].coverage


# -- underflow: values below the smallest normal number ----------------------------------------------


@pytest.mark.parametrize("backend", ["jax", "torch"])
@pytest.mark.parametrize("scale", [1e-20, 1e-30], ids=["1e-20", "1e-30"])
def test_subnormal_gradients_are_no_false_alarm(backend, scale):
    """XLA flushes subnormals to zero and PyTorch rounds them to a subnormal spacing: both are within
    the underflow term, which decides there."""
    pytest.importorskip(backend)
    report = crosscheck.run(layers=3, batch=4, dim=4, scale=scale, backends=[backend])
    assert report.passed, report.problems
    (comparison,) = report.comparisons
    assert "underflow" in comparison.tolerance_sources


def test_subnormal_weights_are_no_false_alarm():
    rng = np.random.default_rng(0)
    weights = (rng.standard_normal((3, 4, 4)) * 1e-39).astype(np.float32)  # every entry subnormal
    x = rng.standard_normal((4, 4)).astype(np.float32)
    report = crosscheck.run(weights=weights, x=x, backends=["jax", "torch"])
    assert report.passed, report.problems


def test_a_bug_is_still_caught_just_above_the_underflow_range():
    report = crosscheck.run(layers=3, batch=4, dim=4, scale=1e-17, backends=[planted.off_at_largest(1e-3)])
    assert not report.passed


def test_ordinary_cases_have_no_underflow_term():
    report = crosscheck.run(layers=3, batch=4, dim=4, backends=["torch"])
    (comparison,) = report.comparisons
    assert "underflow" not in comparison.tolerance_sources
