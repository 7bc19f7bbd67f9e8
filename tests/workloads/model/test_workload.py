"""Workloads: the definition, deterministic inputs, the oracle, the driver and the examples."""

from __future__ import annotations

import importlib.util
import json
import sys

import numpy as np
import pytest
from paths import ROOT

import crosscheck
from crosscheck._workloads.model.oracle.entries import estimate
from crosscheck._workloads.registry import load_workload

sys.path.insert(0, str(ROOT))  # the examples/ package of the repository

from examples import healthy
from examples.gelu_port import mlp_buggy, mlp_fixed


def _linear(**overrides):
    fields = {
        "name": "linear",
        "parameters": {"w": (3, 2), "b": (2,)},
        "inputs": {"x": (5, 3)},
        "reference": lambda p, i: float(np.sum((i["x"] @ p["w"] + p["b"]) ** 2)),
    }
    return crosscheck.Workload(**{**fields, **overrides})


def test_make_is_deterministic_and_rounded_once_to_the_dtype():
    workload = _linear()
    params, inputs = workload.make(seed=3, dtype="float32")
    again, _ = workload.make(seed=3, dtype="float32")
    wide, _ = workload.make(seed=3, dtype="float64")
    assert {k: v.shape for k, v in params.items()} == {"w": (3, 2), "b": (2,)}
    assert inputs["x"].dtype == np.float32
    assert all(np.array_equal(params[k], again[k]) for k in params)
    assert np.array_equal(params["w"], wide["w"].astype(np.float32))


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"parameters": {}}, "at least one array"),
        ({"parameters": {"w": (3, 0)}}, "tuple of positive integers"),
        ({"inputs": {"w": (1,)}}, "both a parameter and an input"),
        ({"reference": 3.0}, "`reference` must be callable"),
        ({"implementations": {"jax": 1}}, "must be a callable"),
    ],
    ids=["no-parameters", "zero-dim", "overlap", "reference", "implementation"],
)
def test_bad_definitions_say_what_is_wrong(overrides, message):
    with pytest.raises((TypeError, ValueError), match=message):
        _linear(**overrides)


@pytest.mark.parametrize(
    ("generate", "message"),
    [
        (
            lambda rng, dtype: ({"w": np.zeros((2, 3)), "b": np.zeros(2)}, {"x": np.zeros((5, 3))}),
            r"\(3, 2\)",
        ),
        (lambda rng, dtype: ({"w": np.zeros((3, 2))}, {"x": np.zeros((5, 3))}), r"\['b', 'w'\]"),
        (lambda rng, dtype: None, "must return \\(params, inputs\\)"),
        (
            lambda rng, dtype: ({"w": np.full((3, 2), np.nan), "b": np.zeros(2)}, {"x": np.zeros((5, 3))}),
            "finite",
        ),
    ],
    ids=["shape", "names", "not-a-pair", "nan"],
)
def test_generate_is_checked(generate, message):
    with pytest.raises(ValueError, match=message):
        _linear(generate=generate).make(seed=0, dtype="float64")


def test_registry_lists_the_stack():
    assert "stack" in crosscheck.available_workloads()
    stack = load_workload("stack")
    assert stack.name == "stack"
    assert load_workload(None) is stack  # the default workload is the stack, a workload like any other
    point = stack.configure(layers=3, batch=2, dim=4).point(dtype="float64", seed=0)
    assert point.params["weights"].shape == (3, 4, 4) and point.inputs["x"].shape == (2, 4)


def test_each_workload_says_how_it_runs():
    # The registry asks a workload for its engine view (``engine``), never its class: a declaration
    # builds its view, a view is its own, and a spec loaded by name keeps that name for worker processes.
    from crosscheck._workloads.model.workload import GenericWorkload

    workload = healthy.WORKLOADS[0]
    view = load_workload(workload)
    assert isinstance(view, GenericWorkload) and view.workload is workload and view.spec is None
    assert load_workload(view) is view
    stack = crosscheck.Stack(layers=2)
    assert load_workload(stack) is stack and stack.engine("stack") is stack
    assert load_workload("ste-stack").spec == "ste-stack"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("nope", "unknown workload `nope`"),
        ("no_such_module_xyz:workload", "cannot import module"),
        ("crosscheck:nothing_here", "has no attribute"),
        ("crosscheck:__version__", "must be a crosscheck.Workload"),
    ],
    ids=["name", "module", "attribute", "not-a-workload"],
)
def test_bad_workload_specs(spec, message):
    with pytest.raises(ValueError, match=message):
        load_workload(spec)


def test_a_file_path_in_a_package_gets_its_dotted_name(monkeypatch):
    monkeypatch.chdir(ROOT)  # examples/ and examples/port/ are packages there
    with pytest.raises(ValueError, match="names a path") as exc:
        load_workload("./examples/port/convnet.py:port")
    assert str(exc.value) == (
        "workload `./examples/port/convnet.py:port` names a path: use `module:attribute` from the file's "
        "folder (e.g. `convnet:port`, run in examples/port) or its dotted name from here "
        "(`examples.port.convnet:port`)."
    )


# --- the driver on the GELU port example -------------------------------------------------------------


def _needs(module: str):
    return pytest.mark.skipif(importlib.util.find_spec(module) is None, reason=f"{module} is not installed")


FRAMEWORKS = [pytest.param(name, marks=_needs(name)) for name in ("jax", "torch")]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("backend", FRAMEWORKS)
def test_the_fixed_port_agrees(backend, dtype):
    report = crosscheck.run(workload=mlp_fixed.workload, backends=[backend], dtype=dtype, seed=1)
    assert report.passed, report.problems
    # Both questions, per parameter: the same function as the NumPy reference, and the derivative of its
    # own float64 loss.
    names = ["w1", "b1", "w2", "b2"]
    expected = [("same function", k) for k in names] + [("derivative", k) for k in names]
    assert [(c.question, c.parameter) for c in report.comparisons] == expected
    assert all(c.worst_ratio < 0.5 for c in report.comparisons)
    assert report.backends[backend].dtype == dtype


@_needs("jax")
@_needs("torch")
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_gelu_bug_is_caught_and_named_by_parameter(dtype):
    report = crosscheck.run(workload=mlp_buggy.workload, dtype=dtype, seed=2)
    assert not report.passed
    jax_ = [c for c in report.comparisons if c.backend == "jax"]
    torch_ = [c for c in report.comparisons if c.backend == "torch"]
    assert all(c.passed for c in torch_)  # the original model is right
    assert {c.parameter for c in jax_ if not c.passed} == {"w1", "b1", "w2", "b2"}
    # The tanh GELU's derivative is right: the port computes a different function.
    assert all(c.passed for c in jax_ if c.question == "derivative")
    worst = max(jax_, key=lambda c: c.worst_ratio)
    assert worst.worst_ratio > 100  # far past the tolerance, not a borderline call
    assert f"in parameter `{worst.parameter}`" in worst.message
    assert f"at parameter `{worst.parameter}` index" in worst.message
    first, loss = report.problems
    assert first == "`jax` disagrees with `numpy-fd` at parameters `w1`, `b1`, `w2`, `b2`"
    assert loss.startswith("`jax`'s float64 loss differs from the NumPy reference's")
    verdict = report.oracle["verdict"]
    # Each clause names its comparison: the failed one first.
    assert verdict[0].startswith(
        "`jax`: a different function from the NumPy reference: its float64 loss differs"
    )
    where = "its gradient differs at parameters `w1`, `b1`, `w2`, `b2` (`jax` vs `numpy-fd`: differences of"
    assert f"{where} the NumPy reference)" in verdict[0]
    assert verdict[0].endswith(
        "; derivative right (`jax` vs `numpy-fd`: differences of `jax`'s own float64 loss)"
    )
    assert verdict[1] == (
        "`torch`: same function as the NumPy reference (`torch` vs `numpy-fd`: differences of the NumPy "
        "reference; the float64 losses agree); derivative right (`torch` vs `numpy-fd`: differences of "
        "`torch`'s own float64 loss)"
    )


@_needs("jax")
@_needs("torch")
@pytest.mark.parametrize("workload", healthy.WORKLOADS, ids=[w.name for w in healthy.WORKLOADS])
def test_healthy_workloads_agree(workload):
    for dtype in ("float32", "float64"):
        report = crosscheck.run(workload=workload, dtype=dtype, seed=7)
        assert report.passed, report.problems


def test_json_report_names_the_workload_and_each_parameter():
    report = crosscheck.run(workload=_linear(), backends=[_linear_grad], dtype="float64")
    data = json.loads(json.dumps(report.to_dict()))
    assert report.passed
    assert data["case"]["workload"] == "linear"
    assert data["case"]["parameters"] == {"w": [3, 2], "b": [2]}
    assert [c["parameter"] for c in data["comparisons"]] == ["w", "b"]
    assert data["comparisons"][0]["tolerance_sources"]["rounding"].startswith("the candidate's own rounding")


# --- third-party backends: grad(params, inputs) -> dict ------------------------------------------------


def _linear_grad(params, inputs):
    r = 2 * (inputs["x"] @ params["w"] + params["b"])
    return {"w": inputs["x"].T @ r, "b": r.sum(axis=0)}


def _linear_grad_reversed_bias(params, inputs):
    grads = _linear_grad(params, inputs)
    return {"w": grads["w"], "b": grads["b"][::-1]}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_hand_written_gradient_agrees_and_a_planted_bug_is_caught(dtype):
    report = crosscheck.run(
        workload=_linear(), backends=[_linear_grad, _linear_grad_reversed_bias], dtype=dtype, seed=4
    )
    verdicts = {(c.backend, c.parameter): c.passed for c in report.comparisons}
    assert verdicts == {
        ("_linear_grad", "w"): True,
        ("_linear_grad", "b"): True,
        ("_linear_grad_reversed_bias", "w"): True,
        ("_linear_grad_reversed_bias", "b"): False,
    }
    assert report.backends["_linear_grad"].notes["rounding"].startswith("measured: re-run in")


@pytest.mark.parametrize(
    ("grad", "error"),
    [
        (lambda p, i: [1.0], "expected a dict of gradients"),
        (lambda p, i: p["w"].__setitem__((0, 0), 5.0), "modified its inputs"),
        (lambda p, i: 1 / 0, "ZeroDivisionError"),
    ],
    ids=["not-a-dict", "writes-inputs", "raises"],
)
def test_a_broken_backend_fails_the_run(grad, error):
    report = crosscheck.run(workload=_linear(), backends=[grad])
    assert not report.passed
    assert error in report.backends["<lambda>"].error


def test_a_missing_parameter_is_an_invalid_comparison():
    report = crosscheck.run(workload=_linear(), backends=[lambda p, i: {"w": _linear_grad(p, i)["w"]}])
    (invalid,) = [c for c in report.comparisons if c.status == "invalid"]
    assert invalid.parameter == "b"
    assert "parameter `b`: missing" in invalid.message
    assert not report.passed
    # The FAILED line joins the problems with "; ": none of them ends in a full stop of its own.
    assert not any(problem.endswith(".") for problem in report.problems), report.problems


def test_a_float32_case_needs_float32_gradients():
    def wide(p, i):
        return {k: v.astype(np.float64) for k, v in _linear_grad(p, i).items()}

    report = crosscheck.run(workload=_linear(), backends=[wide])
    assert not report.passed
    assert "wrong dtype" in report.comparisons[0].message


# --- the oracle --------------------------------------------------------------------------------------


def _tanh_loss(x, t):
    def loss(p):
        y = np.tanh(x @ p["w1"] + p["b1"]) @ p["w2"] + p["c"]
        return float(np.sum((y - t) ** 2))

    return loss


def _tanh_grad(x, t, p):
    h = np.tanh(x @ p["w1"] + p["b1"])
    gy = 2 * (h @ p["w2"] + p["c"] - t)
    gz = (gy @ p["w2"].T) * (1 - h**2)
    return {"w1": x.T @ gz, "b1": gz.sum(0), "w2": h.T @ gy, "c": np.asarray(gy.sum())}


@pytest.mark.parametrize("seed", range(6))
def test_the_oracle_error_bars_cover_the_true_error(seed):
    rng = np.random.default_rng(seed)
    scale = 10.0 ** rng.uniform(-2, 2)  # small and large gradients alike
    x, t = scale * rng.standard_normal((12, 3)), rng.standard_normal((12, 2))
    params = {
        "w1": rng.standard_normal((3, 5)) / 2,
        "b1": rng.standard_normal(5),
        "w2": rng.standard_normal((5, 2)),
        "c": np.asarray(rng.standard_normal()),  # a 0-d parameter
    }
    est = estimate(_tanh_loss(x, t), params)
    exact = _tanh_grad(x, t, params)
    for name, value in exact.items():
        assert est.value[name].shape == value.shape
        error = np.abs(est.value[name] - value)
        assert np.all(error <= est.error[name]), name
        assert not est.unjudgeable[name].any()
        assert np.max(error) <= 1e-8 * np.max(np.abs(value)) + 1e-12
    # Richardson's tableau at 4 steps, 8 evaluations an entry, more where one is refined (36 before).
    assert est.evaluations <= 16 * sum(v.size for v in params.values()) + 1


@pytest.mark.parametrize(
    ("loss", "point", "value"),
    [
        (lambda w: np.abs(w), 0.0, 0.0),  # symmetric: a central difference sees slope 0 and no error
        (lambda w: np.maximum(w, 0.0), 1e-9, 0.5),  # a kink closer than any step
    ],
    ids=["abs-at-0", "relu-near-0"],
)
def test_the_oracle_says_which_entries_it_cannot_judge(loss, point, value):
    est = estimate(lambda p: float(np.sum(loss(p["w"]))), {"w": np.array([point, 1.5, -2.0])})
    assert est.unjudgeable["w"].tolist() == [True, False, False]
    assert est.reason["w"][0] == "a kink: the one-sided derivatives differ"
    assert est.value["w"][0] == pytest.approx(value, abs=1e-3)
    assert est.error["w"][0] >= 0.9  # covers both one-sided slopes


def test_unjudgeable_entries_are_counted_not_passed_and_strict_fails_them():
    workload = crosscheck.Workload(
        name="abs",
        parameters={"w": (3,)},
        inputs={},
        reference=lambda p, i: float(np.sum(np.abs(p["w"]))),
        generate=lambda rng, dtype: ({"w": np.array([0.0, 1.5, -2.0])}, {}),
    )
    grad = [lambda p, i: {"w": np.sign(p["w"])}]
    report = crosscheck.run(workload=workload, backends=grad, dtype="float64")
    (c,) = report.comparisons
    assert report.passed and c.unjudgeable == 1 and c.judged == 2
    assert "1 unjudgeable (1 a kink: the one-sided derivatives differ)" in c.message
    assert not crosscheck.run(workload=workload, backends=grad, dtype="float64", strict=True).passed


# --- the surrogate: what stop_gradient-style implementations really differentiate -------------------


def _frozen(**overrides):
    # The implementations compute d/dw sum(w * stop_gradient(w)) = w, not the gradient 2w of sum(w ** 2).
    def jax_loss(p, i):
        import jax

        return (p["w"] * jax.lax.stop_gradient(p["w"])).sum()

    def torch_loss(p, i):
        return (p["w"] * p["w"].detach()).sum()

    fields = {
        "name": "frozen",
        "parameters": {"w": (4,)},
        "inputs": {},
        "reference": lambda p, i: float(np.sum(p["w"] ** 2)),
        "implementations": {"jax": jax_loss, "torch": torch_loss},
    }
    return crosscheck.Workload(**{**fields, **overrides})


def _surrogate(base, inputs):
    return lambda p: float(np.sum(p["w"] * base["w"]))


FROZEN = _frozen()
FROZEN_WITH_SURROGATE = _frozen(surrogate=_surrogate)


@_needs("jax")
@_needs("torch")
def test_the_oracle_differentiates_the_surrogate_when_given():
    without = crosscheck.run(workload=FROZEN, dtype="float64")
    assert not without.passed  # d sum(w ** 2) = 2w, which stop_gradient does not compute
    report = crosscheck.run(workload=FROZEN_WITH_SURROGATE, dtype="float64")
    assert report.passed, report.problems
    assert report.case["oracle_differentiates"].startswith("surrogate")
    assert report.backends["numpy-fd"].notes["differentiates"].startswith("surrogate")


# --- bad input: errors that say what is wrong ---------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"reference": lambda p, i: float("nan")}, "must be finite at the case's point, found nan"),
        ({"reference": lambda p, i: "x"}, "must return a float"),
        ({"reference": lambda p, i: 1 / 0}, "raised at the case's point: ZeroDivisionError"),
        ({"surrogate": lambda p, i: 3}, "must return a function of the parameters"),
    ],
    ids=["nan", "not-a-float", "raises", "surrogate"],
)
def test_a_bad_reference_is_a_value_error(overrides, message):
    with pytest.raises(ValueError, match=message):
        crosscheck.run(workload=_linear(**overrides), backends=[_linear_grad])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"dim": 4}, "`dim` applies to the stack workload only"),
        ({"weights": np.ones((1, 2, 2)), "x": np.ones((1, 2))}, "`weights` applies to the stack"),
        ({"backends": ["jax"]}, "has no `jax` implementation"),
        ({"backends": None}, "has no implementations to check"),
    ],
    ids=["stack-option", "stack-arrays", "no-such-implementation", "no-implementations"],
)
def test_run_with_a_workload_rejects_what_does_not_apply(kwargs, message):
    with pytest.raises(ValueError, match=message):
        crosscheck.run(workload=_linear(), **kwargs)


def test_an_implementation_of_another_framework_needs_an_adapter():
    workload = _linear(implementations={"mxnet": lambda p, i: 0.0})
    with pytest.raises(ValueError, match="crosscheck differentiates implementations named jax, torch"):
        crosscheck.run(workload=workload, backends=["mxnet"])


@_needs("jax")
@_needs("torch")
def test_another_backend_as_reference_and_prefixed_implementation_names():
    exact = dict(mlp_fixed.workload.implementations)
    workload = crosscheck.Workload(
        name="two-jax-ports",
        parameters=mlp_buggy.workload.parameters,
        inputs=mlp_buggy.workload.inputs,
        reference=mlp_buggy.workload.reference,
        implementations={"torch": exact["torch"], "jax-exact": exact["jax"], "jax-tanh": mlp_buggy.jax_loss},
    )
    report = crosscheck.run(workload=workload, reference="torch", dtype="float64")
    failing = {(c.backend, c.parameter) for c in report.comparisons if not c.passed}
    assert failing == {("jax-tanh", name) for name in ("w1", "b1", "w2", "b2")}
    assert len(report.comparisons) == 8
    assert report.backends["torch"].role == "reference"
    assert report.backends["torch"].notes["rounding"] == "measured: re-run in float32"


def test_integer_inputs_keep_their_dtype():
    def generate(rng, dtype):
        return {"table": rng.standard_normal((5, 2))}, {"ids": rng.integers(0, 5, size=7)}

    def grad(p, i):
        out = np.zeros_like(p["table"])
        np.add.at(out, i["ids"], 2 * p["table"][i["ids"]])
        return {"table": out}

    workload = crosscheck.Workload(
        name="embedding",
        parameters={"table": (5, 2)},
        inputs={"ids": (7,)},
        reference=lambda p, i: float(np.sum(p["table"][i["ids"]] ** 2)),
        generate=generate,
    )
    params, inputs = workload.make(seed=0, dtype="float32")
    assert inputs["ids"].dtype.kind == "i" and params["table"].dtype == np.float32
    assert crosscheck.run(workload=workload, backends=[grad]).passed
    assert len({workload, workload}) == 1  # hashable, by identity


def test_the_oracle_is_not_a_candidate():
    with pytest.raises(ValueError, match="can be the reference only"):
        crosscheck.run(workload=_linear(), backends=["numpy-fd"])


def _layer_grad(p, i):
    h = np.tanh(i["x"] @ p["w"])
    return {"w": i["x"].T @ (1 - h * h)}


def test_the_repeat_check_reads_each_bound_a_parameter_at_a_time():
    """The repeat check of a model workload reads each comparison's bound when it needs it
    (``rounding.Bound``): a second call beyond rounding fails, one within it is noted."""
    workload = crosscheck.Workload(
        name="tanh",
        parameters={"w": (6, 4)},
        inputs={"x": (3, 6)},
        reference=lambda p, i: float(np.sum(np.tanh(i["x"] @ p["w"]))),
    )
    calls: list[int] = []

    def accumulates(p, i):
        calls.append(1)
        return {"w": _layer_grad(p, i)["w"] * len(calls)}

    def flickers(p, i):
        calls.append(p["w"].dtype == np.float32)  # the case's calls, not the re-run in float64
        g = _layer_grad(p, i)["w"]
        if sum(calls) == 2 and calls[-1]:  # one entry one unit in the last place away on the second call
            g[0, 0] = np.nextafter(g[0, 0], np.inf, dtype=g.dtype)
        return {"w": g}

    report = crosscheck.run(workload=workload, backends=[accumulates], reference=_layer_grad)
    assert report.backends["accumulates"].status == "failed"
    assert "the second call differs: stateful or nondeterministic" in report.backends["accumulates"].error
    calls.clear()
    report = crosscheck.run(workload=workload, backends=[flickers], reference=_layer_grad)
    assert report.passed, report.problems
    assert "within rounding" in report.backends["flickers"].notes["nondeterministic"]
    assert all("rounding" not in c.arrays for c in report.comparisons)


@_needs("jax")
def test_an_implementations_adapter_is_kept_with_its_workload_and_goes_with_it():
    import gc
    import weakref

    from crosscheck._workloads.model.workload import GenericWorkload

    class Held:  # what a loss may hold: a port's holds its port, weights and modules
        pass

    held = Held()

    def loss(params, inputs, held=held):
        return (params["w"] * inputs["x"]).sum()

    workload = _linear(parameters={"w": (3,)}, inputs={"x": (3,)}, implementations={"jax": loss})
    adapter = GenericWorkload(workload).resolve("jax")
    # a second check of the same workload gets the same adapter: JAX compiles its gradient once
    assert GenericWorkload(workload).resolve("jax") is adapter
    gone = weakref.ref(held)
    del workload, adapter, loss, held
    gc.collect()
    assert gone() is None  # nothing process-wide keeps a workload's loss, or what it holds


def _linear_jax_loss(params, inputs):  # module level: a workload of it pickles
    return (params["w"] * inputs["x"]).sum()


def _linear_of(loss):
    return _linear(parameters={"w": (3,)}, inputs={"x": (3,)}, reference=None, implementations={"jax": loss})


@_needs("jax")
def test_a_checked_workload_pickles_and_copies_without_its_adapters():
    import copy
    import functools
    import pickle

    from crosscheck._workloads.model.workload import GenericWorkload

    workload = _linear_of(functools.partial(_linear_jax_loss))  # no plain function: kept on the workload
    adapter = GenericWorkload(workload).resolve("jax")  # its compiled functions
    for made in (pickle.loads(pickle.dumps(workload)), copy.copy(workload)):
        assert list(made.implementations) == ["jax"]
        assert GenericWorkload(made).resolve("jax") is not adapter  # its own, made when it is checked
    assert GenericWorkload(workload).resolve("jax") is adapter


@_needs("jax")
def test_workloads_of_the_same_module_level_loss_share_its_adapter():
    from crosscheck._workloads.model.workload import GenericWorkload

    first, second = _linear_of(_linear_jax_loss), _linear_of(_linear_jax_loss)
    assert GenericWorkload(first).resolve("jax") is GenericWorkload(second).resolve("jax")


#: Read by ``_scaled``, the helper of a module-level loss, while JAX traces it: 1 is the healthy loss.
_SCALE = 1.0


def _scaled(value):
    return value * _SCALE


def _scaled_jax_loss(params, inputs):  # module level: one adapter serves every workload of it
    return _scaled(((inputs["x"] @ params["w"] + params["b"]) ** 2).sum())


@_needs("jax")
def test_a_workload_made_afresh_from_the_same_functions_is_judged_as_they_are_now(monkeypatch):
    """Workloads made afresh from module-level functions share one adapter (compiled once): a second
    check in the process, after a global its helper reads changed, judges the changed loss."""
    first = crosscheck.check(_linear(implementations={"jax": _scaled_jax_loss}), backends=["jax"])
    assert first.passed, first.problems
    monkeypatch.setattr(sys.modules[__name__], "_SCALE", 1.05)
    second = crosscheck.check(_linear(implementations={"jax": _scaled_jax_loss}), backends=["jax"])
    assert not second.passed  # 5 % off the reference now
    assert {c.question for c in second.comparisons if not c.passed} == {"same function"}
