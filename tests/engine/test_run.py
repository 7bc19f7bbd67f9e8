"""The front door (``crosscheck._engine.run``, ``records``): ``crosscheck.Stack`` owns its knobs,
``crosscheck.check`` takes a workload and option records, ``run`` is its flat form; a workload is
loaded once per run; the quantity table drives the CLI's choices and the worker's methods."""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import json
import sys
import textwrap

import numpy as np
import pytest
from messages import crossed

import crosscheck
from crosscheck._cli.main import build_parser, main
from crosscheck._engine.execute import execute
from crosscheck._engine.process.isolate_worker import METHODS
from crosscheck._engine.quantity import QUANTITIES
from crosscheck._engine.request import Request
from crosscheck._workloads.registry import load_workload


def stack_grad(weights, x):
    """The ReLU stack's gradient in NumPy (the case's dtype): a plain-function backend."""
    ys, y = [x], x
    for w in weights:
        y = np.maximum(y @ w, 0)
        ys.append(y)
    g, out = 2 * y, np.zeros_like(weights)
    for k in range(len(weights) - 1, -1, -1):
        g = g * (ys[k + 1] > 0)
        out[k] = ys[k].T @ g
        g = g @ weights[k].T
    return out


# -- Stack ---------------------------------------------------------------------------------------------


def test_a_stack_owns_its_knobs_and_the_run_gives_dtype_and_seed():
    stack = crosscheck.Stack(layers=3, batch=2, dim=4, init="integer", scale=2.0)
    point = stack.point(dtype="float64", seed=5)
    assert point.params["weights"].shape == (3, 4, 4) and point.inputs["x"].shape == (2, 4)
    assert point.case == crosscheck.Case(3, 2, 4, "float64", 5, "integer", 2.0).to_dict()
    weights, x = crosscheck.make_inputs(crosscheck.Case(3, 2, 4, "float64", 5, "integer", 2.0))
    assert np.array_equal(point.params["weights"], weights) and np.array_equal(point.inputs["x"], x)


def test_a_stack_declares_its_knobs_as_data_with_its_cases_defaults():
    import dataclasses
    import inspect

    from crosscheck._workloads.registry import case_knobs

    knobs = case_knobs("stack")
    fields = {f.name: f.default for f in dataclasses.fields(crosscheck.Case)}
    assert {name: knob.default for name, knob in knobs.items()} == fields  # the same names, order, defaults
    signature = inspect.signature(crosscheck.Stack).parameters
    assert {k: signature[k].default for k in crosscheck.Stack().knobs if k != "explain"} == {
        k: fields[k] for k in ("layers", "batch", "dim", "init", "scale")
    }
    assert list(fields) == list(knobs)
    assert knobs["init"].choices == ("gaussian", "identity", "integer", "nearzero")
    assert knobs["dtype"].choices == ("float32", "float64", "bfloat16", "float16")
    # What the run sets (dtype, seed) and what the stack takes (configure) make its whole case.
    assert set(knobs) - {"dtype", "seed"} == crosscheck.Stack.takes - {"explain", "weights", "x"}


def test_a_workload_of_its_own_arrays_has_only_the_points_knobs():
    workload = load_workload("ste-stack")
    assert [knob.name for knob in workload.case_knobs] == ["dtype", "seed"]
    assert workload.known_answer(object()) == ""


def test_the_ci_matrix_and_its_known_answers_are_the_stacks():
    from crosscheck._workloads.stack.matrix import CASES

    stack = load_workload("stack")
    assert stack.ci_cases() == [case.to_dict() for case in CASES]
    report = crosscheck.check(
        crosscheck.Stack(layers=2, batch=3, dim=2, init="identity"), backends=["numpy-fd"]
    )
    assert stack.known_answer(report) == "exact"  # every entry exactly 2 * N = 6


@pytest.mark.parametrize(
    ("knobs", "error", "message"),
    [
        ({"layers": 0}, ValueError, "`layers` must be at least 1, found 0."),
        ({"dim": 2.5}, TypeError, "`dim` must be an integer, found 2.5."),
        ({"init": "uniform"}, ValueError, "`init` must be one of gaussian, identity, integer, nearzero"),
        ({"scale": -1.0}, ValueError, "`scale` must be a positive finite number, found -1.0."),
    ],
    ids=["layers", "dim", "init", "scale"],
)
def test_a_stack_refuses_a_knob_with_todays_message(knobs, error, message):
    with pytest.raises(error, match=message.replace("(", r"\(").replace(")", r"\)")):
        crosscheck.Stack(**knobs)


def test_from_arrays_copies_validates_and_records_the_hashes():
    weights, x = np.ones((2, 3, 3), dtype=np.float32), np.ones((4, 3), dtype=np.float32)
    stack = crosscheck.Stack.from_arrays(weights, x)
    weights[0, 0, 0] = 7.0  # the caller's arrays change after: the stack's do not
    point = stack.point(dtype="float64", seed=0)  # the arrays' dtype is theirs
    assert point.params["weights"][0, 0, 0] == 1.0 and point.dtype == "float32"
    assert point.params["weights"] is not weights and point.inputs["x"] is not x
    held = np.ones((2, 3, 3), dtype=np.float32)
    assert point.case == {
        "source": "user arrays",
        "layers": 2,
        "batch": 4,
        "dim": 3,
        "dtype": "float32",
        "weights_sha256": hashlib.sha256(held.tobytes()).hexdigest(),
        "x_sha256": hashlib.sha256(x.tobytes()).hexdigest(),
    }
    with pytest.raises(ValueError, match=r"`weights` must have shape \(L, d, d\)"):
        crosscheck.Stack.from_arrays(np.ones((2, 3)), x)
    with pytest.raises(ValueError, match="must be float32 or float64; found int64"):
        crosscheck.Stack.from_arrays(np.ones((2, 3, 3), dtype=np.int64), np.ones((4, 3), dtype=np.int64))


def test_the_default_workload_is_the_default_stack():
    assert isinstance(load_workload(None), crosscheck.Stack)
    assert load_workload("stack") is load_workload(None)
    assert load_workload(None).knobs == crosscheck.Stack().knobs


def test_a_stack_with_knobs_round_trips_to_a_worker_process():
    stack = crosscheck.Stack(layers=3, batch=2, dim=5, init="identity", scale=0.5, explain=True)
    sent = crossed({"workload": stack.spec})["workload"]  # as a worker receives it
    json.dumps(sent)  # plain data
    again = load_workload(sent)
    assert isinstance(again, crosscheck.Stack) and again.knobs == stack.knobs
    made = again.point(dtype="float32", seed=1)
    assert made.case == stack.point(dtype="float32", seed=1).case


# -- check and its records ----------------------------------------------------------------------------


def _without_timings(report):
    data = report.to_dict()
    data.pop("environment", None)
    for record in data["backends"].values():
        record.pop("seconds", None)
    return data


def test_check_with_records_gives_the_report_run_gives():
    flat = crosscheck.run(
        layers=3,
        batch=2,
        dim=4,
        dtype="float64",
        seed=3,
        backends=[stack_grad],
        rtol=1e-6,
        atol=1e-9,
        oracle_mode="full",
        repeat=1,
    )
    records = crosscheck.check(
        crosscheck.Stack(layers=3, batch=2, dim=4),
        backends=[stack_grad],
        dtype="float64",
        seed=3,
        slack=crosscheck.Slack(rtol=1e-6, atol=1e-9),
        oracle=crosscheck.Oracle(mode="full"),
        execution=crosscheck.Execution(repeat=1),
    )
    assert records.passed and flat.passed
    assert _without_timings(records) == _without_timings(flat)


def test_run_is_an_alias_that_builds_the_request_check_builds(monkeypatch):
    # One act, one request: run's flat keywords become check's records, and its workload options the
    # request's workload_options (which check never sets); nothing else differs.
    from crosscheck._engine import run as front

    built = []
    monkeypatch.setattr(front, "execute", built.append)
    both = {"backends": ["jax"], "reference": "torch", "dtype": "float64", "seed": 3, "quantity": "hvp"}
    both.update(strict=True, progress=print)
    crosscheck.check(
        "stack",
        slack=crosscheck.Slack(rtol=1e-6, atol=1e-9),
        oracle=crosscheck.Oracle("full", directions=3),
        execution=crosscheck.Execution(repeat=1, isolate=False, timeout=30.0, jax_precision="highest"),
        **both,
    )
    crosscheck.run(
        workload="stack",
        rtol=1e-6,
        atol=1e-9,
        oracle_mode="full",
        directions=3,
        repeat=1,
        isolate=False,
        timeout=30.0,
        jax_precision="highest",
        layers=3,
        explain=True,
        **both,
    )
    crosscheck.run()
    checked, flat, default = built
    assert flat.workload_options == {"layers": 3, "explain": True}
    assert dataclasses.replace(flat, workload_options=None) == checked
    # Nothing given: no workload option, and the case's dtype and seed left to the request's defaults.
    assert default == Request(workload_options={})
    assert default.case == checked.case | {"dtype": "float32", "seed": 0}


def test_every_keyword_of_run_reaches_the_request():
    # A keyword of run in none of flat_request's groups would be dropped without a word.
    from crosscheck._engine import run as front

    records = {"rtol", "atol", "oracle_mode", "directions", "budget", "repeat", "isolate", "timeout"}
    records |= {"jax_platform", "jax_precision", "jax_deterministic"}
    records |= {"torch_device", "torch_matmul_tf32", "torch_cudnn_tf32", "torch_deterministic"}
    groups = [front.CHECK_KEYWORDS, front.CASE_KEYWORDS, front.WORKLOAD_KEYWORDS, records]
    named = [name for group in groups for name in group]
    assert sorted(named) == sorted(inspect.signature(crosscheck.run).parameters)


@pytest.mark.parametrize(
    ("make", "error", "message"),
    [
        (lambda: crosscheck.Slack(rtol=1e-3, atol=None), ValueError, "found only `rtol`"),
        (lambda: crosscheck.Slack(rtol=None, atol=None), ValueError, "needs both `rtol` and `atol`"),
        (lambda: crosscheck.Slack(rtol=-1.0, atol=0.0), ValueError, "`rtol` must be a non-negative finite"),
        (
            lambda: crosscheck.Oracle(mode="all"),
            ValueError,
            "`oracle_mode` must be one of auto, full, outputs, screen",
        ),
        (lambda: crosscheck.Oracle(directions=0), ValueError, "`directions` must be a positive integer"),
        (lambda: crosscheck.Execution(repeat=0), ValueError, "`repeat` must be a positive integer"),
        (lambda: crosscheck.Execution(isolate="yes"), TypeError, "`isolate` must be True, False or 'auto'"),
        (lambda: crosscheck.Execution(timeout=-1), ValueError, "`timeout` must be a positive number"),
        (lambda: crosscheck.check(None, slack=(1e-3, 1e-3)), TypeError, "`slack` must be a crosscheck.Slack"),
        (lambda: crosscheck.check(None, oracle="full"), TypeError, "`oracle` must be a crosscheck.Oracle"),
    ],
    ids=[
        "rtol-alone",
        "no-pair",
        "negative",
        "mode",
        "directions",
        "repeat",
        "isolate",
        "timeout",
        "slack-tuple",
        "oracle-str",
    ],
)
def test_the_records_are_validated_when_made(make, error, message):
    with pytest.raises(error, match=message):
        make()


def test_run_refuses_a_quantity_a_workload_has_no_judge_for():
    workload = crosscheck.Workload(
        name="lin",
        parameters={"w": (3, 2)},
        inputs={"x": (4, 3)},
        reference=lambda p, i: float(np.sum((i["x"] @ p["w"]) ** 2)),
    )
    with pytest.raises(ValueError, match="`quantity` applies to the stack workload only; workload `lin`"):
        crosscheck.run(workload=workload, quantity="hvp")


# -- a workload is loaded once ---------------------------------------------------------------------------

COUNTING = """
import numpy as np
import crosscheck

CALLS = []

def factory():
    CALLS.append(1)
    return crosscheck.Workload(
        name="counted", parameters={"w": (3, 2)}, inputs={"x": (4, 3)},
        reference=lambda p, i: float(np.sum((i["x"] @ p["w"]) ** 2)),
    )

def grad(p, i):
    return {"w": 2 * i["x"].T @ (i["x"] @ p["w"])}
"""


@pytest.fixture
def counting(tmp_path, monkeypatch):
    (tmp_path / "counting_workload.py").write_text(textwrap.dedent(COUNTING))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    yield
    sys.modules.pop("counting_workload", None)


def test_the_cli_calls_a_workload_factory_once(counting, capsys):
    # In process (--no-isolate), where the count can be read; contained, the worker loads it once.
    argv = ["run", "--workload", "counting_workload:factory", "--backend", "counting_workload:grad"]
    assert main([*argv, "--quiet", "--no-isolate"]) == 0, capsys.readouterr()
    assert sys.modules["counting_workload"].CALLS == [1]


def test_run_calls_a_workload_factory_once(counting):
    report = crosscheck.run(
        workload="counting_workload:factory", backends=["counting_workload:grad"], isolate=False
    )
    assert report.passed
    assert sys.modules["counting_workload"].CALLS == [1]


# -- the quantity table ------------------------------------------------------------------------------------


def test_the_quantity_table_drives_the_cli_choices_and_the_worker_methods():
    run_parser = build_parser()._subparsers._group_actions[0].choices["run"]
    (action,) = [a for a in run_parser._actions if a.dest == "quantity"]
    assert tuple(action.choices) == tuple(QUANTITIES)
    assert {q.method for q in QUANTITIES.values() if q.method is not None} <= set(METHODS)
    assert None not in METHODS  # a quantity a judge computes itself (`output`) asks no backend method


def test_the_report_keeps_no_rounding_bounds_once_the_repeat_check_has_read_them():
    """Each comparison's per-entry bounds (``arrays["rounding"]``) serve the repeat check alone: the report
    keeps the arrays a plot draws, and only when a plot is asked, not those (issue 38: one more copy of
    the gradient per candidate); an accumulating backend still fails its second call."""
    stack = crosscheck.Stack(layers=2, batch=3, dim=4)
    report = crosscheck.check(stack, backends=[stack_grad], dtype="float64", oracle=crosscheck.Oracle("full"))
    assert report.passed and report.comparisons
    assert all(c.arrays == {} for c in report.comparisons)  # no plot asked: nothing kept per entry
    plotted = execute(  # as --plot asks: the request's ``plot``
        Request(stack, backends=[stack_grad], dtype="float64", oracle=crosscheck.Oracle("full"), plot=True)
    )
    assert [c.to_dict() for c in plotted.comparisons] == [c.to_dict() for c in report.comparisons]
    assert all("rounding" not in c.arrays and "ratio" in c.arrays for c in plotted.comparisons)
    calls = []

    def accumulates(weights, x):
        calls.append(1)
        return stack_grad(weights, x) * len(calls)

    failed = crosscheck.check(
        stack, backends=[accumulates], dtype="float64", oracle=crosscheck.Oracle("full")
    )
    assert not failed.passed and "second call differs" in failed.backends["accumulates"].error
