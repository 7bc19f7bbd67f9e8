"""``crosscheck.Train`` and the ``update`` quantity: a tiny linen port trained with AdamW on both sides,
healthy and with each planted optimizer bug (located to its step, parameter and optimizer part), a
model bug (the gradients already differ), and the bad inputs (one line, exit 2)."""

from __future__ import annotations

import importlib.util
import sys

import numpy as np
import pytest

import crosscheck
from crosscheck._cli.main import main
from examples.port import optimizers

pytestmark = pytest.mark.skipif(
    any(importlib.util.find_spec(m) is None for m in ("flax", "torch", "optax")),
    reason="needs flax, torch and optax",
)

STEPS = 3


def _port(name="tiny", *, gelu=False, ln_eps=1e-5):
    import flax.linen as nn
    import jax
    import torch

    class TorchNet(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.ln, self.fc2 = torch.nn.Linear(3, 6), torch.nn.LayerNorm(6), torch.nn.Linear(6, 2)

        def forward(self, x):
            return self.fc2(torch.nn.functional.gelu(self.ln(self.fc1(x)), approximate="tanh"))

    class FlaxNet(nn.Module):
        @nn.compact
        def __call__(self, x):
            h = nn.LayerNorm(epsilon=ln_eps, name="ln")(nn.Dense(6, name="fc1")(x))
            return nn.Dense(2, name="fc2")(jax.nn.gelu(h, approximate=not gelu))

    torch.manual_seed(0)
    x = np.random.default_rng(0).standard_normal((8, 3))
    return crosscheck.Port(name=name, torch=TorchNet().eval(), jax=FlaxNet(), inputs={"x": x})


def _train(bug=None, **kwargs):
    return optimizers.train(_port(**kwargs), bug=bug, steps=STEPS)


def tiny_train():
    """The healthy tiny train, for import strings (``tests.workloads.train.test_train:tiny_train``)."""
    return _train()


def tiny_train_decay_all():
    """The tiny train with ``decay_all`` planted, for import strings."""
    return _train("decay_all")


def test_the_healthy_pair_agrees_at_every_step(capsys):
    report = crosscheck.check(_train(), quantity="update")
    assert report.passed, report.problems
    record = report.backends["jax"].notes["update"]
    assert record == {
        "steps": STEPS,
        "first_step": None,
        "first_parameter": None,
        "state": None,
        "start_gradients": "agree",
    }
    assert "the port's gradients agree at the start (step 0)" in report.verdicts()["jax"]
    assert next(c for c in report.comparisons if c.parameter == "ln.weight (gradient at step 0)").passed
    assert report.backends["torch"].role == "reference"
    assert "no finite-difference oracle" in report.backends["torch"].notes["reference"]
    rows = next(c for c in report.comparisons if c.parameter == "fc1.weight").per_layer
    assert [r["step"] for r in rows] == list(range(STEPS + 1))  # row 0: the start, the same on both sides
    assert report.to_dict()["case"]["steps"] == STEPS
    # the optimizer state at the start, paired by kind and name, its table before the numbers
    assert report.case["optimizer_state"] == [
        {"torch": "step", "optax": "count", "parameters": 6},
        {"torch": "exp_avg", "optax": "mu", "parameters": 6},
        {"torch": "exp_avg_sq", "optax": "nu", "parameters": 6},
    ]
    names = [c.parameter for c in report.comparisons]
    assert "fc1.weight (exp_avg)" in names and "fc2.bias (step)" in names
    from rich.console import Console

    report.render(Console(width=200, color_system=None))
    out = capsys.readouterr().out
    assert out.index("torch `exp_avg` <-> optax `mu`: 6 parameters") < out.index("fc1.weight")


@pytest.mark.parametrize("bug", list(optimizers.BUGS))
def test_each_planted_optimizer_bug_is_located_to_its_part(bug):
    report = crosscheck.check(_train(bug), quantity="update")
    assert not report.passed
    record = report.backends["jax"].notes["update"]
    # Adam's first update is the gradient's sign (m / sqrt(v) = g / |g|): a bug that only rescales the
    # gradient or the second moment (clipping per tensor, epsilon misplaced) shows from step 2
    assert record["first_step"] in (1, 2), record
    assert record["gradients"] == "agree", record
    assert record["part"] == optimizers.BUGS[bug][1], record
    text = report.verdicts()["jax"]
    assert f"differs first at step {record['first_step']}, in `{record['first_parameter']}`" in text
    assert f"the part that differs is the {record['part']}" in text


@pytest.mark.parametrize("bug", [None, *optimizers.SGD_BUGS])
def test_sgd_with_momentum(bug):
    report = crosscheck.check(optimizers.sgd(_port(), bug=bug, steps=STEPS), quantity="update")
    record = report.backends["jax"].notes["update"]
    assert report.passed == (bug is None), record
    if bug is not None:
        assert record["first_step"] == 1 and record["part"] == optimizers.SGD_BUGS[bug][1], record
        assert list(record["controls"]) == ["momentum"]  # weight decay is off already: not tried


def test_with_jax_as_reference_pytorch_is_the_candidate():
    report = crosscheck.check(_train("decay_all"), quantity="update", reference="jax")
    record = report.backends["torch"].notes["update"]
    assert not report.passed and record["part"] == "weight decay", record


def test_a_model_bug_is_the_models_not_the_optimizers():
    report = crosscheck.check(_train(gelu=True), quantity="update")
    assert not report.passed
    record = report.backends["jax"].notes["update"]
    assert record["first_step"] == 2 and record["gradients"] == "differ", record  # step 1: signs
    assert "part" not in record
    assert "the model is at fault, not the optimizer" in report.verdicts()["jax"]


def test_a_gradient_bug_fails_at_the_start_whatever_the_steps_make_of_it():
    # Adam's first update is the gradient's sign: one step of a LayerNorm whose epsilon is off (1e-3
    # against PyTorch's 1e-5) agrees, and only the gradients at the start show the bug
    report = crosscheck.check(optimizers.train(_port(ln_eps=1e-3), steps=1), quantity="update")
    record = report.backends["jax"].notes["update"]
    assert not report.passed, report.verdicts()
    assert record["first_step"] is None, record  # the one update agrees
    assert record["start_gradients"] == "differ", record
    assert record["start_gradient_differs_first"] == "fc1.weight", record
    text = report.verdicts()["jax"]
    assert text.startswith(
        "the port's gradients at the start (step 0, before any step) differ, first in `fc1.weight`"
    )
    failed = {c.parameter for c in report.comparisons if not c.passed}
    assert "ln.weight (gradient at step 0)" in failed, failed


def test_a_training_in_which_nothing_moves_is_no_check():
    zero = optimizers.train(_port(), steps=2)
    zero = crosscheck.Train(
        zero.port, zero.torch_optimizer, zero.optax, hyper={**zero.hyper, "lr": 0.0}, steps=2
    )
    report = crosscheck.check(zero, quantity="update")
    assert not report.passed
    assert "no parameter of `torch` moved in 2 steps" in report.verdicts()["jax"]


def test_run_takes_steps():
    report = crosscheck.run(workload=_train(), quantity="update", steps=1)
    assert report.passed and report.backends["jax"].notes["update"]["steps"] == 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--workload", "examples.port.gpt2:train", "--quantity", "update", "--steps", "0"],
            "`steps` must be",
        ),
        (["--workload", "examples.port.gpt2:port", "--quantity", "update"], "crosscheck.Train workload"),
        (["--quantity", "update"], "crosscheck.Train workload"),
        (["--workload", "examples.port.gpt2:port", "--steps", "3"], "crosscheck.Train workload"),
        (
            ["--workload", "examples.port.gpt2:train", "--quantity", "update", "--plot", "x.png"],
            "not available with `--quantity update`",
        ),
        (
            ["--workload", "examples.port.gpt2:train", "--quantity", "update", "--save-bundle", "b.npz"],
            "`--save-bundle` is not available with `--quantity update`: a bundle holds arrays",
        ),
        (
            ["--workload", "examples.port.gpt2:train", "--quantity", "update", "--dtype", "float64"],
            "`dtype` of quantity 'update' must be float32",
        ),
    ],
    ids=["steps-0", "port-without-optimizer", "stack", "steps-without-update", "plot", "bundle", "float64"],
)
def test_bad_input_is_one_line_and_exit_2(args, message, capsys):
    assert main(["run", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err and "Traceback" not in err


def _ignores_weight_decay(*, weight_decay, **hyper):
    """The optax side of a newcomer's port: its factory drops `weight_decay`, so optax's default (1e-4)
    applies where PyTorch's AdamW was given more."""
    return optimizers.optax_adamw(**hyper, weight_decay=1e-4)


def test_a_setting_the_jax_factory_ignores_is_named_by_the_rerun_that_changed_only_the_other_side():
    # The verdict said which part differs (or "the update rule itself differs"), never that turning it
    # off changed nothing on one side: the factory ignored the setting.
    hyper = {**optimizers.HYPER, "weight_decay": 0.5}
    train = crosscheck.Train(
        _port(), torch_optimizer=optimizers.torch_adamw, optax=_ignores_weight_decay, hyper=hyper, steps=STEPS
    )
    report = crosscheck.check(train, quantity="update")
    assert not report.passed
    controls = report.backends["jax"].notes["update"]["controls"]
    assert {part: c["unchanged"] for part, c in controls.items()} == {
        "epsilon": [],  # a part at float32's rounding changes both sides a little: no claim either way
        "weight decay": ["jax"],
        "gradient clipping": [],
        "moments and bias correction": [],
    }
    assert (
        "turning the weight decay off (weight_decay=0.0) changed nothing on `jax`'s side and changed the "
        "other's: `jax`'s optimizer ignores `weight_decay` (does its factory pass `weight_decay` on? "
        "otherwise the optimizer's own default applies)"
    ) in report.verdicts()["jax"]


#: A user's module holding a port and the train of it, as a port's module usually does.
TRAIN_MODULE = """
from examples.port import optimizers
from examples.port.convnet import port

train = optimizers.train(port, steps=2)
"""


def test_the_gradient_of_a_train_is_refused_with_how_to_check_its_port(tmp_path, monkeypatch, capsys):
    # It said "`--quantity update` and `--steps` go together with a crosscheck.Train workload": not what
    # the user asked, nor how to check the gradients they asked for.
    (tmp_path / "trainmod.py").write_text(TRAIN_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "trainmod", raising=False)
    assert main(["run", "--workload", "trainmod:train", "--quantity", "grad"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith(
        "`--quantity grad` does not apply to workload `convnet-train`: it checks `--quantity update`; the "
        "gradients of the port it trains are checked with `--workload trainmod:port` (`--quantity grad`)."
    ), err
    with pytest.raises(ValueError, match=r"with `workload='trainmod:port'` \(`quantity='grad'`\)\.$"):
        crosscheck.run(workload="trainmod:train", quantity="grad")
    with pytest.raises(ValueError, match=r"crosscheck\.check\(train\.port, quantity='grad'\)"):
        crosscheck.check(_train(), quantity="grad")


def test_a_train_checks_the_update_only():
    with pytest.raises(ValueError, match="it checks 'update'"):
        crosscheck.check(_train(), quantity="grad")
    with pytest.raises(ValueError, match="`dtype` of quantity 'update' must be float32"):
        crosscheck.check(_train(), quantity="update", dtype="float64")
    with pytest.raises(ValueError, match="`steps` must be a positive integer"):
        crosscheck.Train(
            _port(), torch_optimizer=optimizers.torch_adamw, optax=optimizers.optax_adamw, steps=0
        )


def test_a_resumed_state_agrees_when_both_sides_resume_alike():
    report = crosscheck.check(optimizers.train(_port(), steps=STEPS, resume=True), quantity="update")
    assert report.passed, report.verdicts()
    start = next(c for c in report.comparisons if c.parameter == "fc1.weight (exp_avg)")
    assert start.max_abs_diff is not None and start.total == 18  # resumed moments, not zeros


@pytest.mark.parametrize("bug", list(optimizers.STATE_BUGS))
def test_a_wrong_start_state_is_named(bug):
    report = crosscheck.check(optimizers.train(_port(), bug=bug, steps=STEPS), quantity="update")
    assert not report.passed
    record = report.backends["jax"].notes["update"]
    kind = optimizers.STATE_BUGS[bug][1].removeprefix("the optimizer state (").removesuffix(")")
    assert record["state"] == {"parameter": "fc1.weight", "kind": kind}, record
    assert f"the optimizer state differs at `fc1.weight` ({kind}) at the start" in report.verdicts()["jax"]
    assert "controls" not in record  # the optimizers started apart: no controlled re-runs


def test_a_warmup_off_by_one_is_the_schedule():
    healthy = crosscheck.check(optimizers.train(_port(), steps=STEPS, warmup=True), quantity="update")
    assert healthy.passed, healthy.verdicts()
    report = crosscheck.check(
        optimizers.train(_port(), bug="warmup_off_by_one", steps=STEPS), quantity="update"
    )
    record = report.backends["jax"].notes["update"]
    assert not report.passed and record["first_step"] == 1, record
    assert record["gradients"] == "agree" and record["part"] == "learning-rate schedule", record


def test_the_optax_state_parts_are_named_by_field_a_second_one_by_its_path():
    import jax.numpy as jnp
    import optax

    from crosscheck._workloads.train import jax_steps

    params = {"w": jnp.ones((2, 3)), "b": jnp.zeros(2)}
    tx = optax.chain(optax.scale_by_adam(), optax.scale_by_learning_rate(optax.linear_schedule(0.0, 1.0, 3)))
    import jax

    parts = jax_steps._parts(tx.init(params), jax.tree_util.tree_structure(params))
    assert [kind for kind, _ in parts] == ["count", "mu", "nu", "1.count"]


def test_junit_has_a_case_per_parameter_and_the_verdict(tmp_path):
    import xml.etree.ElementTree as ET

    path = tmp_path / "update.xml"
    args = [
        "--workload",
        "tests.workloads.train.test_train:tiny_train_decay_all",
        "--quantity",
        "update",
        "--no-isolate",
    ]
    assert main(["run", *args, "--junit", str(path)]) == 1
    suite = ET.parse(path).getroot().find("testsuite")
    names = [case.get("name") for case in suite.findall("testcase")]
    assert "jax vs torch [ln.weight]" in names and "jax vs torch [fc1.weight (exp_avg)]" in names
    failed = [case.get("name") for case in suite.findall("testcase") if case.find("failure") is not None]
    assert "jax vs torch [ln.weight]" in failed  # a norm's scale decayed: the planted bug
    assert "the part that differs is the weight decay" in suite.find("system-out").text
    assert int(suite.get("tests")) == len(names)


def test_a_sweep_checks_a_train_s_update(tmp_path):
    import json

    out = tmp_path / "sweep.json"
    args = ["--workload", "tests.workloads.train.test_train:tiny_train", "--jobs", "0", "--json", str(out)]
    assert main(["sweep", *args]) == 0
    (record,) = json.loads(out.read_text())["cases"]
    assert record["report"]["quantity"] == "update", record["report"]["quantity"]
    assert record["report"]["case"]["steps"] == STEPS


def _torch_sgd_step(params, grads, state, *, lr, momentum):
    """A hand-written SGD with momentum: PyTorch's convention (the first buffer is the gradient)."""
    for k, p in params.items():
        kept = state.setdefault(k, {})
        buf = kept.get("momentum_buffer")
        buf = grads[k].clone() if buf is None else buf.mul_(momentum).add_(grads[k])
        kept["momentum_buffer"] = buf
        p.sub_(lr * buf)


def _jax_sgd_step(params, grads, state, *, lr, momentum, dampening=0.0):
    import jax

    trace = grads if state is None else jax.tree_util.tree_map(lambda b, g: momentum * b + g, state, grads)
    trace = jax.tree_util.tree_map(lambda b: (1 - dampening) * b, trace)
    return jax.tree_util.tree_map(lambda p, b: p - lr * b, params, trace), trace


@pytest.mark.parametrize("dampening", [0.0, 0.5], ids=["healthy", "dampened"])
def test_a_step_function_on_each_side(dampening):
    import functools

    train = crosscheck.Train(
        _port(),
        torch_step=_torch_sgd_step,
        jax_step=functools.partial(_jax_sgd_step, dampening=dampening),
        hyper={"lr": 1e-2, "momentum": 0.9},
        steps=STEPS,
    )
    report = crosscheck.check(train, quantity="update")
    record = report.backends["jax"].notes["update"]
    assert report.passed == (dampening == 0.0), record
    if dampening:
        assert record["first_step"] == 1 and record["gradients"] == "agree", record
    assert report.case["optimizer_state"] == [{"torch": "momentum_buffer", "optax": None, "parameters": 0}]


def test_a_train_takes_one_optimizer_or_step_function_a_side():
    with pytest.raises(TypeError, match=r"give one of `optax` .* found neither"):
        crosscheck.Train(_port(), torch_optimizer=optimizers.torch_adamw)
    with pytest.raises(TypeError, match="found `torch_optimizer` and `torch_step`"):
        crosscheck.Train(
            _port(),
            torch_optimizer=optimizers.torch_adamw,
            torch_step=_torch_sgd_step,
            jax_step=_jax_sgd_step,
        )


def _jax_sgd_step_float32_rows(params, grads, state, *, lr, momentum):
    """``_jax_sgd_step`` with a step 5 % larger on 2 of the 6 rows of ``fc1.weight`` (PyTorch's rows:
    the kernel's columns), in float32 only: the float64 re-run is healthy."""
    import jax.numpy as jnp

    new, trace = _jax_sgd_step(params, grads, state, lr=lr, momentum=momentum)
    kernel = params["fc1"]["kernel"]
    if kernel.dtype == jnp.float32:
        scale = jnp.ones(kernel.shape[-1], kernel.dtype).at[:2].set(1.05)
        new = {**new, "fc1": {**new["fc1"], "kernel": kernel + (new["fc1"]["kernel"] - kernel) * scale}}
    return new, trace


def test_a_float32_error_on_a_minority_of_entries_does_not_set_its_own_tolerance():
    train = crosscheck.Train(
        _port(),
        torch_step=_torch_sgd_step,
        jax_step=_jax_sgd_step_float32_rows,
        hyper={"lr": 1e-2, "momentum": 0.9},
        steps=STEPS,
    )
    report = crosscheck.check(train, quantity="update")
    record = report.backends["jax"].notes["update"]
    assert not report.passed, report.verdicts()
    assert record["first_step"] == 1 and record["first_parameter"] == "fc1.weight", record
    fc1 = next(c for c in report.comparisons if c.parameter == "fc1.weight")
    assert fc1.max_rel_diff > 1e-2  # 5 % of a step: no rounding
    assert "rounding of `fc1.weight`" in report.backends["jax"].notes["rounding"]
    assert "an error of that float32 run alone" in report.verdicts()["jax"]


class _PythonCountStep:
    """SGD with momentum whose step count is kept in Python (reset at the first step, ``state`` None)
    and whose learning rate is 1.5x from step 3: compiled, it runs only while tracing, and the count
    stops where the trace was made."""

    count = 0

    def __call__(self, params, grads, state, *, lr, momentum):
        self.count = 1 if state is None else self.count + 1
        rate = 1.5 * lr if self.count >= 3 else lr
        return _jax_sgd_step(params, grads, state, lr=rate, momentum=momentum)


@pytest.mark.parametrize("steps", [3, 5])
def test_the_step_function_runs_as_written_at_every_step(steps):
    train = crosscheck.Train(
        _port(),
        torch_step=_torch_sgd_step,
        jax_step=_PythonCountStep(),
        hyper={"lr": 1e-2, "momentum": 0.9},
        steps=steps,
    )
    report = crosscheck.check(train, quantity="update")
    record = report.backends["jax"].notes["update"]
    assert not report.passed, report.verdicts()
    assert record["first_step"] == 3, record
    assert "run as written at every step" in report.backends["jax"].notes["step"]


def _jax_sgd_step_dropping(params, grads, state, *, lr, momentum):
    """``_jax_sgd_step`` that returns the params without ``fc1`` (two leaves)."""
    new, trace = _jax_sgd_step(params, grads, state, lr=lr, momentum=momentum)
    return {k: v for k, v in new.items() if k != "fc1"}, trace


def _jax_sgd_step_reshaping(params, grads, state, *, lr, momentum):
    """``_jax_sgd_step`` that returns ``fc2``'s kernel transposed."""
    new, trace = _jax_sgd_step(params, grads, state, lr=lr, momentum=momentum)
    return {**new, "fc2": {**new["fc2"], "kernel": new["fc2"]["kernel"].T}}, trace


@pytest.mark.parametrize(
    ("step", "said"),
    [
        (_jax_sgd_step_dropping, "returned params with no leaf `fc1/bias` (6,)"),
        (_jax_sgd_step_reshaping, "returned params with the leaf `fc2/kernel` of shape (2, 6), not (6, 2)"),
    ],
    ids=["drops-a-leaf", "reshapes-a-leaf"],
)
def test_a_jax_step_that_returns_another_tree_is_refused_in_one_line(monkeypatch, capsys, step, said):
    train = crosscheck.Train(
        _port(), torch_step=_torch_sgd_step, jax_step=step, hyper={"lr": 1e-2, "momentum": 0.9}, steps=STEPS
    )
    with pytest.raises(ValueError, match=r"^train `tiny-train`: `jax_step\(params, grads, state\)` ") as info:
        crosscheck.check(train, quantity="update")
    assert said in str(info.value) and "\n" not in str(info.value), str(info.value)
    monkeypatch.setattr(sys.modules[__name__], "bad_step_train", train, raising=False)
    spec = f"{__name__}:bad_step_train"
    assert main(["run", "--workload", spec, "--quantity", "update", "--no-isolate"]) == 2
    err = capsys.readouterr().err
    assert said in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
