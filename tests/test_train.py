"""``crosscheck.Train`` and the ``update`` quantity: a tiny linen port trained with AdamW on both sides,
healthy and with each planted optimizer bug (located to its step, parameter and optimizer part), a
model bug (the gradients already differ), and the bad inputs (one line, exit 2)."""

from __future__ import annotations

import importlib.util

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


def _port(name="tiny", *, gelu=False):
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
            h = nn.LayerNorm(epsilon=1e-5, name="ln")(nn.Dense(6, name="fc1")(x))
            return nn.Dense(2, name="fc2")(jax.nn.gelu(h, approximate=not gelu))

    torch.manual_seed(0)
    x = np.random.default_rng(0).standard_normal((8, 3))
    return crosscheck.Port(name=name, torch=TorchNet().eval(), jax=FlaxNet(), inputs={"x": x})


def _train(bug=None, **kwargs):
    return optimizers.train(_port(**kwargs), bug=bug, steps=STEPS)


def test_the_healthy_pair_agrees_at_every_step():
    report = crosscheck.check(_train(), quantity="update")
    assert report.passed, report.problems
    record = report.backends["jax"].notes["update"]
    assert record == {"steps": STEPS, "first_step": None, "first_parameter": None}
    assert report.backends["torch"].role == "reference"
    assert "no finite-difference oracle" in report.backends["torch"].notes["reference"]
    rows = next(c for c in report.comparisons if c.parameter == "fc1.weight").per_layer
    assert [r["step"] for r in rows] == list(range(STEPS + 1))  # row 0: the start, the same on both sides
    assert report.to_dict()["case"]["steps"] == STEPS


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
    ],
    ids=["steps-0", "port-without-optimizer", "stack", "steps-without-update", "plot"],
)
def test_bad_input_is_one_line_and_exit_2(args, message, capsys):
    assert main(["run", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err and "Traceback" not in err


def test_a_train_checks_the_update_only():
    with pytest.raises(ValueError, match="it checks 'update'"):
        crosscheck.check(_train(), quantity="grad")
    with pytest.raises(ValueError, match="`dtype` of quantity 'update' must be float32"):
        crosscheck.check(_train(), quantity="update", dtype="float64")
    with pytest.raises(ValueError, match="`steps` must be a positive integer"):
        crosscheck.Train(
            _port(), torch_optimizer=optimizers.torch_adamw, optax=optimizers.optax_adamw, steps=0
        )
