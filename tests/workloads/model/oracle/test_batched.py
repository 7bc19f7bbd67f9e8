"""The model oracle's batched evaluations (``oracle.batched``) and its budget (``oracle.budget``).

Batched: the same points as one call a point, so the same derivatives and error bars (to the losses'
rounding); a model ``vmap`` cannot run falls back to one call a point and the report says why. Budget:
the tensors not judged when it runs out are "not checked" and the run fails; bad values are refused.
"""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest

import crosscheck
from crosscheck._cli.main import main
from crosscheck._workloads.model.oracle import batched
from crosscheck._workloads.model.oracle.directions import directional, make_directions
from crosscheck._workloads.model.oracle.entries import estimate
from crosscheck._workloads.model.oracle.precision import FIRST, PROBE_EVALUATIONS
from crosscheck._workloads.model.oracle.sources import _batched

needs = pytest.mark.skipif(
    importlib.util.find_spec("jax") is None or importlib.util.find_spec("torch") is None,
    reason="the small models need jax and torch",
)


def _arrays(seed: int = 0) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    params = {"w": rng.normal(size=(5, 6)), "b": rng.normal(size=(6,))}
    return params, {"x": rng.normal(size=(3, 5))}


def _torch_loss(item: bool = False):
    import torch

    def loss(p, i):
        h = torch.tanh(i["x"] @ p["w"] + p["b"])
        if item and float(h.sum().item()) > 1e9:  # .item(): vmap cannot run this model
            h = h * 2
        return (h**2).sum()

    return loss


def _jax_loss(p, i):
    import jax.numpy as jnp

    return (jnp.tanh(i["x"] @ p["w"] + p["b"]) ** 2).sum()


def _backend(name: str, loss):
    from crosscheck._workloads.model.workload import _framework_backend

    return _framework_backend(name, loss)


@needs
@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_batched_evaluations_give_the_same_derivatives_and_bars(framework):
    params, inputs = _arrays()
    loss = _torch_loss() if framework == "torch" else _jax_loss
    backend = _backend(framework, loss)
    fn = _batched(backend, backend.loss, inputs)
    assert isinstance(fn, batched.Batched)
    one = estimate(fn.one, params)  # 36 entries: 288 evaluations planned, batched from 256
    many = estimate(fn, params)
    assert fn.fallback is None and fn.calls > 0 and fn.points >= 8 * 36
    assert many.evaluations == one.evaluations  # the same points
    for k in params:
        assert np.all(np.abs(many.value[k] - one.value[k]) <= 0.01 * one.error[k])
        np.testing.assert_allclose(many.error[k], one.error[k], rtol=0.5)
        assert not one.unjudgeable[k].any() and not many.unjudgeable[k].any()
    # along directions of the group of both tensors, as screening does
    dirs = make_directions(params, 4)
    plain = directional(fn.one, params, dirs)
    monkey = batched.FROM_EVALUATIONS
    try:
        batched.FROM_EVALUATIONS = 0  # screening a group plans too few evaluations to batch by default
        again = directional(fn, params, dirs)
    finally:
        batched.FROM_EVALUATIONS = monkey
    assert np.all(np.abs(again.value - plain.value) <= 0.01 * plain.error)


@needs
def test_a_model_vmap_cannot_run_falls_back_to_one_call_a_point_and_says_why():
    params, inputs = _arrays()
    backend = _backend("torch", _torch_loss(item=True))
    fn = _batched(backend, backend.loss, inputs)
    one = estimate(_batched(backend, backend.loss, inputs).one, params)
    found = estimate(fn, params)
    assert fn.fallback is not None and ".item()" in fn.fallback
    assert fn.note().startswith("one call a point: it cannot be batched")
    for k in params:
        np.testing.assert_array_equal(found.value[k], one.value[k])
        np.testing.assert_array_equal(found.error[k], one.error[k])


def _workload(item: bool) -> crosscheck.Workload:
    def generate(rng, dtype):
        params, inputs = _arrays(int(rng.integers(1 << 30)))
        return {k: v.astype(dtype) for k, v in params.items()}, {
            k: v.astype(dtype) for k, v in inputs.items()
        }

    return crosscheck.Workload(
        name="tanh-layer",
        parameters={"w": (5, 6), "b": (6,)},
        inputs={"x": (3, 5)},
        implementations={"torch": _torch_loss(item), "jax": _jax_loss},
        generate=generate,
    )


@needs
def test_the_report_says_how_the_oracle_evaluated_each_loss():
    report = crosscheck.run(workload=_workload(item=True), seed=1)
    assert report.passed, report.problems
    said = report.oracle["batching"]
    assert said["`torch`'s own float64 loss"].startswith("one call a point: it cannot be batched")
    assert said["`jax`'s own float64 loss"].startswith("batched: ")
    assert any(line.startswith("oracle batching: ") for line in report.oracle["lines"])


# --- the budget ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [0, -1.0, float("nan"), float("inf"), True, "10"])
def test_a_budget_that_is_not_a_positive_number_of_seconds_is_refused(value):
    with pytest.raises(ValueError, match="`budget` must be a positive number of seconds"):
        crosscheck.Oracle(budget=value)


@pytest.mark.parametrize("value", ["0", "-5", "nan", "inf", "soon"])
def test_the_command_line_refuses_a_bad_budget_in_one_line(value, capsys):
    assert main(["run", "--workload", "examples.no_reference:workload", f"--budget={value}"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--budget" in err and "Traceback" not in err


def test_the_stack_refuses_a_budget():
    with pytest.raises(ValueError, match="`budget` applies to the model oracle"):
        crosscheck.run(layers=2, dim=3, batch=2, budget=10, backends=[lambda w, x: np.zeros_like(w)])


@needs
def test_a_budget_that_runs_out_fails_the_run_and_says_what_finishing_costs(tmp_path):
    path = tmp_path / "report.json"
    code = main(
        ["run", "--workload", "tests.workloads.model.oracle.test_batched:HEALTHY", "--no-isolate"]
        + ["--budget", "1e-9"]
        + ["--json", str(path)]
    )
    assert code == 1  # a check that did not happen fails
    oracle = json.loads(path.read_text())["oracle"]
    budget = oracle["budget"]
    assert budget["ran_out"] and budget["judged"] == 0 and budget["parameters"] == 2
    assert budget["to_finish"]["evaluations"] > 0
    assert "ran out" in oracle["own_loss"]["torch"]
    assert any(line.startswith("oracle budget: 1e-09 s") and "it ran out" in line for line in oracle["lines"])


@needs
def test_a_budget_that_runs_out_says_its_cause_once_per_candidate_not_once_per_parameter(capsys):
    # --budget 0.01 on an 18-tensor port said "the oracle's budget of 0.01 s ran out" for each of the 18
    # parameters of each candidate, and again as each candidate's own-loss problem.
    report = crosscheck.run(workload=_workload(item=False), seed=1, budget=1e-9)
    assert not report.passed  # a check that did not happen fails
    assert {c.status for c in report.comparisons} == {"invalid"} and len(report.comparisons) == 4
    said = [p for p in report.problems if "ran out" in p]
    assert len(said) == 2, report.problems  # one per candidate
    for name in ("torch", "jax"):
        (line,) = [p for p in said if p.startswith(f"`{name}`: ")]
        assert line.startswith(f"`{name}`: parameters `w`, `b`: nothing to difference: "), line
        assert line.count("ran out") == 1, line
    # After the table too: one heading and one message per candidate (then the FAILED line's two).
    report.render(_console())
    out = " ".join(capsys.readouterr().out.split())
    assert out.count("torch vs numpy-fd, 2 parameters parameters `w`, `b`: nothing to difference") == 1, out
    assert out.count("nothing to difference") == 4, out


@needs
def test_without_a_budget_the_default_one_holds_and_the_report_says_it_ended_the_run(monkeypatch):
    # before: no budget unless one was given, so a float64 check of a tiny diffusers UNet with a planted
    # bug ran past 1200 s without a verdict
    from crosscheck._workloads.model.oracle import budget

    monkeypatch.setattr(budget, "DEFAULT_SECONDS", 1e-9)
    report = crosscheck.run(workload=_workload(item=False), seed=1)
    assert not report.passed  # a check that did not happen fails
    said = [p for p in report.problems if "ran out" in p]
    assert said and all(
        "the oracle's default budget of 1e-09 s (--budget SECONDS for more) ran out" in p for p in said
    )
    assert report.oracle["budget"]["default"] and report.oracle["budget"]["ran_out"]
    assert any(line.startswith("oracle budget: 1e-09 s (the default), ") for line in report.oracle["lines"])


@needs
def test_a_default_budget_that_did_not_run_out_is_not_said():
    report = crosscheck.run(workload=_workload(item=False), seed=1)
    assert report.passed, report.problems
    assert "budget" not in report.oracle and not any("budget" in line for line in report.oracle["lines"])


def _console():
    from rich.console import Console

    return Console(width=200, highlight=False)


@pytest.mark.parametrize(
    ("spent", "left", "said"),
    [
        (
            0.012,
            0.3,
            "0.012 s spent in 17 evaluations; ... finishing needs at least 99 more evaluations, under a "
            "second more at this rate",
        ),
        (0.3, 2.46, "0.3 s spent in 17 evaluations; ... evaluations, roughly 2.5 s more at this rate"),
        (12.0, 95.0, "12 s spent in 17 evaluations; ... evaluations, roughly 95 s more at this rate"),
    ],
    ids=["under-a-second", "seconds", "tens-of-seconds"],
)
def test_the_budget_line_says_a_short_time_in_words_not_roughly_0_s(spent, left, said):
    from crosscheck._workloads.model.oracle.budget import line

    budget = {
        "seconds": 0.01,
        "spent": spent,
        "evaluations": 17,
        "ran_out": True,
        "judged": 0,
        "parameters": 2,
        "to_finish": {"evaluations": 99, "seconds": left},
    }
    text = line(budget)
    head, tail = said.split(" ... ")
    assert head in text and tail in text, text
    assert "roughly 0 s" not in text and "0.0 s" not in text


@needs
def test_a_budget_that_does_not_run_out_changes_nothing():
    report = crosscheck.run(workload=_workload(item=False), seed=1, budget=1e6)
    assert report.passed, report.problems
    budget = report.oracle["budget"]
    assert not budget["ran_out"] and budget["judged"] == budget["parameters"] == 2
    # every evaluation the oracle made counts: the differences and each own loss's noise probe (9 points
    # of a float64 loss, every one of the 17 where the first leave a doubt)
    probes = sum(p["evaluations"] for p in report.oracle["precision"].values())
    assert len(report.oracle["precision"]) == len(report.oracle["own_loss"]) == 2
    assert all(
        p["evaluations"] in (2 * FIRST + 1, PROBE_EVALUATIONS) for p in report.oracle["precision"].values()
    )
    assert budget["evaluations"] == sum(report.oracle["evaluations"].values()) + probes


def __getattr__(name):  # the command line loads the workload by import string
    if name == "HEALTHY":
        return _workload(item=False)
    raise AttributeError(name)


def test_an_import_strings_attribute_is_built_once(tmp_path, monkeypatch):
    # A module's __getattr__ that builds its attribute (the zoo's ports: a model each) ran twice: once
    # for hasattr, once for getattr.
    (tmp_path / "counted_ports.py").write_text(
        "CALLS = []\n"
        "def __getattr__(name):\n"
        "    if name != 'thing':\n"
        "        raise AttributeError(name)\n"
        "    CALLS.append(name)\n"
        "    return object()\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    from crosscheck._backends.strings import import_attribute

    import_attribute("counted_ports:thing", kind="workload")
    import counted_ports

    assert counted_ports.CALLS == ["thing"]
    with pytest.raises(ValueError, match="has no attribute `other`"):
        import_attribute("counted_ports:other", kind="workload")
