"""The workload oracle on models: own-loss differences, the two questions, zero gradients, the empty check,
the float64 re-run checked, screening with a budget and its coverage (small stand-in models of our own)."""

from __future__ import annotations

import importlib.util
import sys

import numpy as np
import pytest
from paths import ROOT

import crosscheck
from crosscheck._cli.main import main
from crosscheck._workloads.model.oracle import directions as oracle_directions
from crosscheck._workloads.model.oracle.directions import directional, make_directions, project
from crosscheck._workloads.model.oracle.entries import EVALUATIONS_PER_ENTRY
from crosscheck._workloads.model.oracle.function import AUTO_EVALUATIONS, differencing
from crosscheck._workloads.model.pinned import ran_in_float32

sys.path.insert(0, str(ROOT))  # the examples/ package of the repository

from examples.no_reference import ATTENTION, mlp

needs_frameworks = pytest.mark.skipif(
    importlib.util.find_spec("jax") is None or importlib.util.find_spec("torch") is None,
    reason="the stand-in models need jax and torch",
)
SMALL = (4, 8, 3)


def _verdict(report, backend):
    (line,) = [v for v in report.oracle["verdict"] if v.startswith(f"`{backend}`")]
    return line


# --- a workload without a NumPy reference -------------------------------------------------------------


@needs_frameworks
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_workload_without_a_numpy_reference_runs_end_to_end(dtype):
    report = crosscheck.run(workload=mlp(SMALL, 6), dtype=dtype, seed=3)
    assert report.passed, report.problems
    assert report.case["oracle_differentiates"].startswith("each implementation's own float64 loss")
    # torch (the first implementation) is differenced: its comparisons answer the derivative question;
    # jax answers both, against torch's loss and its own.
    questions = {(c.backend, c.question) for c in report.comparisons}
    assert questions == {("torch", "derivative"), ("jax", "same function"), ("jax", "derivative")}
    assert _verdict(report, "torch") == (
        "`torch`: derivative right (`torch` vs `numpy-fd`: differences of `torch`'s own float64 loss)"
    )
    assert _verdict(report, "jax") == (
        "`jax`: same function as `torch` (`jax` vs `numpy-fd`: differences of `torch`'s own float64 loss; "
        "the float64 losses agree); derivative right (`jax` vs `numpy-fd`: differences of `jax`'s own "
        "float64 loss)"
    )
    assert report.oracle["mode"] == "full" and report.oracle["losses"]["jax"]["passed"]
    assert set(report.oracle["evaluations"]) == {"`torch`'s own float64 loss", "`jax`'s own float64 loss"}


@needs_frameworks
@pytest.mark.parametrize(
    ("variant", "failing", "verdict"),
    [
        (
            {"jax_gelu": "tanh"},
            ("jax", "same function"),
            "`jax`: a different function from `torch`: its float64 loss differs",
        ),
        (
            {"torch_backward": "wrong"},
            ("torch", "derivative"),
            "`torch`: derivative wrong at parameters `w0`, `b0`, `g0`, `beta0` (`torch` vs `numpy-fd`: "
            "differences of `torch`'s own float64 loss); same function as `jax` (`jax` vs `numpy-fd`: "
            "differences of `torch`'s own float64 loss; the float64 losses agree)",
        ),
    ],
    ids=["tanh-gelu-port", "wrong-custom-backward"],
)
def test_the_verdict_names_which_question_failed(variant, failing, verdict):
    report = crosscheck.run(workload=mlp(SMALL, 6, **variant), seed=1)
    assert not report.passed
    assert {(c.backend, c.question) for c in report.comparisons if not c.passed} == {failing}
    backend = failing[0]
    assert _verdict(report, backend).startswith(verdict)
    if backend == "jax":  # a different function, whose own derivative is right
        assert _verdict(report, "jax").endswith(
            "; derivative right (`jax` vs `numpy-fd`: differences of `jax`'s own float64 loss)"
        )
        assert any(p.startswith("`jax`'s float64 loss differs from") for p in report.problems)


# --- BERT's cases, with stand-ins of our own ----------------------------------------------------------


@needs_frameworks
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_zero_by_construction_bias_is_judged_against_zero(dtype):
    report = crosscheck.run(workload=ATTENTION, dtype=dtype, seed=2)
    assert report.passed, report.problems
    by = {(c.backend, c.question, c.parameter): c for c in report.comparisons}
    for key in (("torch", "derivative", "bk"), ("jax", "same function", "bk"), ("jax", "derivative", "bk")):
        assert by[key].status == "ok" and by[key].unjudgeable == 0 and by[key].judged == 4
    assert report.oracle["zero_in_every_implementation"] == {"exactly": ["unused"], "within rounding": ["bk"]}
    assert any(line.startswith("zero gradient in every implementation: `unused` (exactly), `bk` (within "
                               "rounding)") for line in report.oracle["lines"])  # fmt: skip


@needs_frameworks
def test_in_bfloat16_a_gradient_within_rounding_of_zero_is_not_called_zero():
    # In bfloat16 a bias whose gradient is 1e-2 is within the rounding of zero: "zero gradient in every
    # implementation" would claim what bfloat16 cannot see. An exact zero is still a zero.
    report = crosscheck.run(workload=ATTENTION, dtype="bfloat16", seed=2)
    assert report.passed, report.problems
    assert report.oracle["zero_in_every_implementation"] == {"exactly": ["unused"], "within rounding": ["bk"]}
    lines = report.oracle["lines"]
    assert (
        "zero gradient in every implementation: `unused` (exactly); judged against zero by the oracle"
        in lines
    )
    assert (
        "indistinguishable from zero at bfloat16's rounding in every implementation: `bk` (a gradient of "
        "zeros would pass; whether it is zero is not seen in bfloat16: check in float32 too)"
    ) in lines
    assert not any("`bk` (within rounding)" in line for line in lines)


@needs_frameworks
def test_a_parameter_zero_everywhere_is_confirmed_by_the_oracle_with_a_backend_as_reference():
    report = crosscheck.run(workload=ATTENTION, dtype="float64", seed=2, reference="torch")
    assert report.passed, report.problems
    checks = report.oracle["zero_checks"]
    assert {(k, s, c["status"]) for k, by in checks.items() for s, c in by.items()} == {
        (k, s, "confirmed") for k in ("unused", "bk") for s in ("torch", "jax")
    }
    # Its line says who confirmed it: nothing is "judged against zero" without saying by what.
    zero = "zero gradient in every implementation: `unused` (exactly), `bk` (within rounding)"
    confirmed = "zero by construction: confirmed by differences of each side's own float64 loss"
    assert f"{zero}; {confirmed}: `unused`, `bk`" in report.oracle["lines"]


@needs_frameworks
@pytest.mark.parametrize(
    ("variant", "mode"), [({}, "full"), ({"jax_gelu": "tanh"}, "screen")], ids=["healthy", "tanh-gelu-bug"]
)
def test_a_flat_loss_is_an_empty_check_and_fails_with_one_line(variant, mode):
    # sum(LayerNorm(y) ** 2) is a constant: every gradient is rounding noise, and a real bug would pass.
    report = crosscheck.run(workload=mlp(SMALL, 6, loss="flat", **variant), seed=0, oracle_mode=mode)
    assert not report.passed
    empty = [p for p in report.problems if p.startswith("the check is empty")]
    assert len(empty) == 1 and "crosscheck.projection_loss" in empty[0]
    assert {c.status for c in report.comparisons} == {"empty"}
    assert not any("unjudgeable" in p for p in report.problems)  # one line, not one per parameter


@needs_frameworks
def test_a_flat_loss_fails_the_command_line(monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    workload = "examples.no_reference:flat"
    assert main(["run", "--workload", workload, "--seed", "0", "--oracle-mode", "screen"]) == 1
    out = capsys.readouterr().out
    assert "FAILED: the check is empty: the gradient of the loss is at rounding level" in " ".join(
        out.split()
    )


@needs_frameworks
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_module_pinned_to_float32_gets_the_conservative_bound_and_a_note(dtype):
    report = crosscheck.run(workload=mlp(SMALL, 6, pinned="jax"), dtype=dtype, seed=4)
    assert report.passed, report.problems
    assert report.backends["torch"].notes["rounding"].startswith("measured: re-run in")
    assert (
        report.backends["jax"]
        .notes["rounding"]
        .startswith("`jax` did not compute in float64: its float64 run gave float32 numbers")
    )
    assert report.oracle["own_loss"]["jax"].startswith("`jax`'s loss came back in float32")
    assert "; derivative not checked: `jax`'s loss came back in float32" in _verdict(report, "jax")


@needs_frameworks
def test_nothing_to_difference_fails():
    # No NumPy reference, and the one implementation computes in float32: no float64 loss to difference.
    report = crosscheck.run(workload=mlp(SMALL, 6, pinned="jax"), backends=["jax"], seed=0)
    assert not report.passed
    assert {c.status for c in report.comparisons} == {"invalid"}
    assert "nothing to difference: the workload has no NumPy reference" in report.problems[0]


def test_a_float64_run_that_computed_in_float32_is_recognized():
    rng = np.random.default_rng(0)
    narrow = {"w": rng.standard_normal((4, 4)).astype(np.float32)}
    wide = {"w": rng.standard_normal((4, 4))}
    assert not ran_in_float32(wide, narrow)
    assert ran_in_float32({"w": narrow["w"].astype(np.float64)}, narrow)  # the same bits
    assert ran_in_float32({"w": rng.standard_normal((4, 4)).astype(np.float32).astype(np.float64)}, narrow)
    assert not ran_in_float32({"w": np.zeros((4, 4))}, {"w": np.zeros((4, 4), np.float32)})


# --- screening with a budget -------------------------------------------------------------------------


def _tanh(p, x):
    return float(np.sum(np.tanh(x @ p["w"] + p["b"]) ** 2))


def _tanh_grad(p, x):
    h = np.tanh(x @ p["w"] + p["b"])
    dz = 2 * h * (1 - h**2)
    return {"w": x.T @ dz, "b": dz.sum(axis=0)}


@pytest.mark.parametrize("seed", range(4))
def test_directional_error_bars_cover_the_true_error(seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((7, 5))
    params = {"w": rng.standard_normal((5, 3)) / 2, "b": rng.standard_normal(3)}
    dirs = make_directions(params, 3)
    est = directional(lambda p: _tanh(p, x), params, dirs)
    exact = project(_tanh_grad(params, x), dirs)
    assert np.all(np.abs(est.value - exact) <= est.error) and not est.unjudgeable.any()
    # 8 a direction (Richardson's tableau at 4 steps), more where one is refined, whatever the
    # tensor's size; the loss at the point once for all (issue 25: 36 a direction before).
    assert est.evaluations <= 16 * len(dirs) + 1


@pytest.mark.parametrize("width", [5, 128])
def test_directions_start_where_their_tableau_has_converged(width, monkeypatch):
    # A direction moves every entry of a tensor at once: from an entry's first step (2**-4 of the RMS)
    # the tableau is not yet converged and is refined 3 to 5 times a direction; from ``DIRECTION_STEP``
    # (2**-8) no direction is refined, and every bar still covers the exact projection (issue 38).
    rng = np.random.default_rng(width)
    x = rng.standard_normal((16, width))
    params = {"w": rng.standard_normal((width, width)) / np.sqrt(width), "b": rng.standard_normal(width)}
    dirs = make_directions(params, 3)
    exact = project(_tanh_grad(params, x), dirs)
    found = {}
    for step in (2.0**-4, oracle_directions.DIRECTION_STEP):
        monkeypatch.setattr(oracle_directions, "DIRECTION_STEP", step)
        est = directional(lambda p: _tanh(p, x), params, dirs)
        assert np.all(np.abs(est.value - exact) <= est.error) and not est.unjudgeable.any()
        found[step] = est.evaluations
    assert found[2.0**-8] == 8 * len(dirs) + 1 < found[2.0**-4]


def test_auto_picks_by_the_number_of_evaluations():
    small = {"w": np.zeros((10, 10))}
    big = {"w": np.zeros((100, 100)), "b": np.zeros(100)}
    assert differencing("auto", small, 4).mode == "full"
    chosen = differencing("auto", big, 4)
    assert chosen.mode == "screen" and chosen.per_parameter == 4  # along 4 directions of every tensor
    assert chosen.why.startswith("auto: 10100 entries")
    assert EVALUATIONS_PER_ENTRY * 10100 > AUTO_EVALUATIONS
    assert differencing("full", big, 4).mode == "full" and differencing("screen", small, 2).mode == "screen"


class Planted:
    """An implementation's adapter with one parameter's gradient off by a relative ``error``."""

    def __init__(self, workload, parameter: str, error: float, name: str = "torch") -> None:
        from crosscheck._workloads.model.workload import _framework_backend

        self.inner = _framework_backend(name, workload.implementations[name])
        self.parameter, self.error, self.name = parameter, error, f"planted-{name}"

    def grad(self, params, inputs):
        grads = dict(self.inner.grad(params, inputs))
        grads[self.parameter] = (grads[self.parameter] * (1 + self.error)).astype(grads[self.parameter].dtype)
        return grads

    def loss(self, params, inputs):
        return self.inner.loss(params, inputs)


@needs_frameworks
def test_screening_a_healthy_model_covers_every_parameter_along_directions():
    workload = mlp((5, 12, 12, 3), 6)
    progress = []
    report = crosscheck.run(workload=workload, seed=1, oracle_mode="screen", directions=2,
                            progress=lambda *args: progress.append(args))  # fmt: skip
    assert report.passed, report.problems
    oracle = report.oracle
    assert oracle["mode"] == "screen" and oracle["directions_per_parameter"] == 2
    every = sorted(workload.parameters)
    assert oracle["coverage"] == {"entry by entry": [], "along directions only": every, "in a group": every}
    # The budget: ~8 evaluations a direction, 2 directions of the group of every tensor, whatever the
    # tensors' sizes and number.
    assert all(n <= 16 * 2 + 1 for n in oracle["evaluations"].values())
    group = "screened: judged in a group of 10 tensors, 2 random directions touching every one"
    assert all(c.coverage == group for c in report.comparisons)
    # what a long run's progress bar shows: the function differenced, and the budget it keeps to
    assert progress and progress[-1][0] == "oracle: `jax`'s own float64 loss (budget 600 s, the default)"
    # the noise probe before the differences reports its evaluations too
    probe = [
        p
        for p in progress
        if p[0] == "oracle: `jax`'s own float64 loss: its noise probe (budget 600 s, the default)"
    ]
    assert probe and probe[-1][1] == probe[-1][2] > 0


@needs_frameworks
@pytest.mark.parametrize(("parameter", "entry_by_entry"), [("b1", True), ("w1", False)], ids=["small", "big"])
def test_screening_catches_a_planted_error_and_localizes_it(parameter, entry_by_entry):
    workload = mlp((5, 20, 20, 3), 6)  # w1 has 400 entries: over LOCALIZE_ENTRIES
    backends = [Planted(workload, parameter, 1e-3), "jax"]
    report = crosscheck.run(workload=workload, seed=2, oracle_mode="screen", backends=backends)
    assert not report.passed
    failing = {(c.backend, c.question, c.parameter) for c in report.comparisons if not c.passed}
    assert failing == {("planted-torch", "derivative", parameter)}  # jax agrees with the planted's loss
    (c,) = [c for c in report.comparisons if not c.passed]
    assert ("then every entry" in c.coverage) == entry_by_entry
    if entry_by_entry:
        assert c.mismatched == c.judged == 20  # every entry of b1 is off by 1e-3


# --- the command line ----------------------------------------------------------------------------------


@needs_frameworks
def test_the_command_line_screens_a_workload_and_says_so(monkeypatch, capsys, tmp_path):
    import json

    monkeypatch.chdir(ROOT)
    path, junit = tmp_path / "r.json", tmp_path / "r.xml"
    argv = ["run", "--workload", "examples.no_reference:workload", "--oracle-mode", "screen"]
    status = main([*argv, "--directions", "2", "--json", str(path), "--junit", str(junit)])
    out = " ".join(capsys.readouterr().out.split())
    assert status == 0
    assert "coverage: 0 parameters entry by entry, 10 along 2 random directions each only" in out
    data = json.loads(path.read_text())
    assert data["oracle"]["mode"] == "screen" and data["oracle"]["directions_per_parameter"] == 2
    assert {c["question"] for c in data["comparisons"]} == {"derivative", "same function"}
    assert 'name="jax vs numpy-fd [w0] (its own loss)"' in junit.read_text()


@needs_frameworks
def test_the_table_has_a_check_column_and_marks_what_was_judged_along_directions_only():
    from crosscheck._report.table import records, table

    report = crosscheck.run(workload=mlp(SMALL, 6), oracle_mode="screen", directions=2)
    headers = [str(column.header).replace("\n", " ") for column in table(report).columns]
    assert headers[:3] == ["backend", "parameter", "check"]
    lines = records(report)
    assert any(line.startswith("jax w0: ") and "check derivative" in line for line in lines), lines
    assert any("check function" in line for line in lines), lines
    screened = [line for line in lines if "worst index dirs" in line]  # no entry was judged one by one
    assert len(screened) == len(report.comparisons), lines
    stack = crosscheck.run(layers=2, dim=3, batch=2, backends=[], reference="numpy-fd")
    assert "check" not in [str(column.header) for column in table(stack).columns]


def test_directions_without_screening_is_a_usage_error(capsys):
    argv = ["run", "--workload", "ste-stack", "--oracle-mode", "full", "--directions", "2"]
    assert main(argv) == 2
    assert "`--directions` applies to screening" in capsys.readouterr().err


# --- calibration, small and fast (benchmarks/calibrate_model_oracle.py runs 50 seeds) ---------------


@needs_frameworks
@pytest.mark.parametrize("seed", range(2))
def test_no_false_alarm_and_both_planted_bugs_caught(seed):
    healthy = crosscheck.run(workload=mlp(SMALL, 6), seed=seed, oracle_mode="screen")
    assert healthy.passed, healthy.problems
    assert max(c.worst_ratio for c in healthy.comparisons) < 0.5
    planted = crosscheck.run(workload=mlp(SMALL, 6, planted=("torch", "w1", 1e-3)), seed=seed,
                             oracle_mode="screen")  # fmt: skip
    assert {(c.backend, c.question, c.parameter) for c in planted.comparisons if not c.passed} == {
        ("torch", "derivative", "w1")
    }
    wrong = crosscheck.run(workload=mlp(SMALL, 6, torch_backward="wrong"), seed=seed, oracle_mode="screen")
    assert {(c.backend, c.question) for c in wrong.comparisons if not c.passed} == {("torch", "derivative")}


@needs_frameworks
def test_another_backend_as_reference_needs_no_numpy_reference():
    report = crosscheck.run(workload=mlp(SMALL, 6), reference="torch", seed=5)
    assert report.passed, report.problems
    assert [c.question for c in report.comparisons] == ["same function"] * 6
    assert report.oracle["reference"] == "a backend (no oracle)"


@needs_frameworks
@pytest.mark.parametrize("framework", ["jax", "torch"])
def test_the_adapters_evaluate_the_loss_in_float64_without_autodiff(framework):
    import jax

    from crosscheck._compare.dtypes import as_dtype
    from crosscheck._workloads.model.workload import _framework_backend

    workload = mlp(SMALL, 6)
    params, inputs = workload.make(seed=0, dtype="float32")
    backend = _framework_backend(framework, workload.implementations[framework])
    wide = backend.loss(as_dtype(params, "float64"), as_dtype(inputs, "float64"))
    narrow = backend.loss(params, inputs)
    assert (wide.dtype, wide.shape, narrow.dtype) == (np.float64, (), np.float32)
    assert wide != narrow.astype(np.float64) and abs(wide - narrow) < 1e-5 * abs(wide)
    assert not jax.config.jax_enable_x64  # x64 was on for the call only
