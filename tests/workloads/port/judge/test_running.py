"""A port checked in training mode (``port/judge/running.py``, ``port/sides/torch_training.py``): the mini
UNet of ``examples/port/unet.py`` with its PyTorch module in ``.train()`` and its Flax call
``train=True``: batch statistics on both sides, each side's updated running statistics compared as
outputs named by their module (the momentum convention bug fails at ``bn``), crosscheck's own
initialisation outside the user's training call, dropout refused unless deterministic; an eval-mode
check says the running statistics are not compared."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

import crosscheck

pytestmark = pytest.mark.skipif(
    any(importlib.util.find_spec(m) is None for m in ("flax", "torch")), reason="needs flax and torch"
)

STATISTICS = ["bn.running_mean (running statistics)", "bn.running_var (running statistics)"]


def _check(name, quantity="output"):
    from examples.port import unet

    return crosscheck.check(getattr(unet, name), quantity=quantity, reference="torch")


def _rows(report):
    return {
        str(c.parameter): c.passed for c in report.comparisons if "running statistics" in str(c.parameter)
    }


def test_the_healthy_training_pair_passes_with_batch_statistics_and_its_running_statistics_compared():
    report = _check("train", quantity="grad")
    assert report.passed, report.verdicts()
    assert _rows(report) == dict.fromkeys(STATISTICS, True)
    assert "the running statistics of `bn` agree after a training-mode forward" in report.verdicts()["jax"]


@pytest.mark.parametrize(
    ("name", "first"), [("train_momentum", "bn.running_mean"), ("train_flax_batch_norm", "bn.running_var")]
)
def test_a_running_statistics_bug_fails_at_its_module(name, first):
    report = _check(name)
    assert not report.passed
    assert not _rows(report)[f"{first} (running statistics)"]
    text = report.verdicts()["jax"]
    assert text.startswith(f"the running statistics differ first at `bn` (`{first}`"), (
        text
    )  # the verdict first
    assert "every module's output agrees" in text  # the outputs cannot see it: only the statistics do
    # the JSON's verdict names the module too, and where the difference starts: a program reads it there
    verdict = report.to_dict()["backends"]["jax"]["notes"]["port"]
    assert (verdict["starts_in"], verdict["module"], verdict["first"]) == ("running statistics", "bn", "bn")
    assert verdict["text"] == text


def test_a_running_statistics_verdict_names_the_module_of_the_first_that_differs():
    from crosscheck._compare.record import Comparison
    from crosscheck._workloads.port.judge import running

    def row(parameter, passed):
        status = "ok" if passed else "mismatch"
        return Comparison(
            backend="jax", reference="torch", passed=passed, status=status, total=1, parameter=parameter
        )

    rows = [
        row("enc.bn.running_mean (running statistics)", True),
        row("enc.bn.running_var (running statistics)", False),
    ]
    origin = running.origin(rows, "the running statistics differ first at `enc.bn`")
    assert (origin.starts_in, origin.module, origin.first) == ("running statistics", "enc.bn", "enc.bn")
    assert origin.text == "the running statistics differ first at `enc.bn`"
    # not compared: no statistic to name, and where it starts is not known
    origin = running.origin([running._failed("jax", "not compared")], "not compared")
    assert (origin.starts_in, origin.module) == ("unknown", None)


def test_batch_statistics_are_used_on_both_sides():
    """The port normalising with its running statistics in training mode fails at `bn`'s output; its
    running statistics differ too, and follow: a module output that differs leads the verdict."""
    report = _check("train_running_average")
    assert not report.passed
    verdict = report.backends["jax"].notes["port"]
    assert (verdict["starts_in"], verdict["module"]) == ("forward", "bn"), report.verdicts()
    assert not any(_rows(report).values())
    text = report.verdicts()["jax"]
    assert text.startswith("the forward pass differs first at `bn`") and "; the running statistics" in text


def test_an_eval_mode_check_says_the_running_statistics_are_not_compared():
    report = _check("port_nchw")
    assert report.passed, report.verdicts()
    assert not _rows(report)
    assert (
        "the running statistics of `bn` are not compared: the check ran in eval mode"
        in report.verdicts()["jax"]
    )


def test_the_user_s_module_is_left_as_it_was():
    from examples.port import unet

    port = unet.train
    before = {k: v.detach().clone() for k, v in port.torch.named_buffers()}
    assert _check("train").passed
    assert port.torch.training and port.torch.bn.track_running_stats
    assert all(np.array_equal(v.numpy(), before[k].numpy()) for k, v in port.torch.named_buffers())


def test_crosscheck_initialises_the_model_outside_the_user_s_training_call():
    from examples.port import unet

    def training_only(model, inputs):  # fails if crosscheck initialised through it
        assert not model.is_initializing(), "initialised through the training call"
        return unet.jax_call_train(model, inputs)

    port = unet.make_port("unet-train-init", train=True, jax_call=training_only, batch_norm="torch")
    report = crosscheck.check(port, quantity="output", reference="torch")
    assert report.passed, report.verdicts()


def test_dropout_in_training_mode_is_refused_with_how_to_make_it_deterministic():
    import flax.linen as nn
    import torch

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc, self.drop = torch.nn.Linear(3, 2), torch.nn.Dropout(0.2)

        def forward(self, x):
            return self.drop(self.fc(x))

    class Flax(nn.Module):
        @nn.compact
        def __call__(self, x):
            return nn.Dense(2, name="fc")(x)

    model = Net().train()
    port = crosscheck.Port(name="drop", torch=model, jax=Flax(), inputs={"x": np.ones((4, 3))})
    with pytest.raises(
        ValueError, match=r"`drop` \(Dropout, p=0\.2\) drops at random.*`model\.drop\.eval\(\)`"
    ):
        crosscheck.check(port, reference="torch")
    model.drop.eval()  # deterministic: checked in training mode
    assert crosscheck.check(port, quantity="output", reference="torch").passed


def _nnx_port(momentum, *, dropout=0.0):
    from flax import nnx

    from examples.port import convnet, convnet_nnx

    model = convnet_nnx.nnx_model()
    model.bn1.momentum = momentum  # Flax's convention: the share of the old statistics kept
    if dropout:
        model.drop = nnx.Dropout(dropout, rngs=nnx.Rngs(0))
    model.train()  # BatchNorm on batch statistics

    def nhwc(inputs):
        return {"x": inputs["x"].transpose(0, 2, 3, 1)}

    return crosscheck.Port(
        name="convnet-nnx-train",
        torch=convnet.torch_model().train(),
        jax=model,
        inputs=convnet.images,
        jax_inputs=nhwc,
    )


def test_an_nnx_port_in_training_mode_compares_its_batch_statistics_in_place():
    """nnx's BatchNorm at PyTorch's momentum (0.9 in Flax's convention): the outputs and gradients agree
    on batch statistics, the running mean agrees, the running variance does not (Flax's is biased)."""
    report = crosscheck.check(_nnx_port(0.9), reference="torch")
    rows = _rows(report)
    assert rows == {
        "bn1.running_mean (running statistics)": True,
        "bn1.running_var (running statistics)": False,
    }
    others = [c for c in report.comparisons if "running statistics" not in str(c.parameter)]
    assert others and all(c.passed for c in others), [c.parameter for c in others if not c.passed]
    assert "the running statistics differ first at `bn1` (`bn1.running_var`" in report.verdicts()["jax"]


def test_an_nnx_momentum_in_pytorch_s_convention_fails_at_its_module():
    report = crosscheck.check(_nnx_port(0.1), quantity="output", reference="torch")
    assert not report.passed
    assert "the running statistics differ first at `bn1` (`bn1.running_mean`" in report.verdicts()["jax"]


def test_an_nnx_dropout_in_training_mode_is_refused_with_how():
    port = _nnx_port(0.9, dropout=0.5)
    with pytest.raises(
        ValueError, match=r"`drop` \(Dropout, rate=0\.5\) drops at random.*`deterministic=True`"
    ):
        print(port.mapping)


def test_a_port_with_convert_has_its_running_statistics_compared_through_its_conversion():
    """The mapping is the user's `convert=`: PyTorch's updated buffers, put through it, are compared
    with the JAX side's updated `batch_stats` leaf by leaf, named by the PyTorch statistic."""
    healthy = _check("train_convert", quantity="grad")
    assert healthy.passed, healthy.verdicts()
    assert _rows(healthy) == dict.fromkeys(STATISTICS, True)
    assert "the running statistics of `bn` agree after a training-mode forward" in healthy.verdicts()["jax"]
    planted = _check("train_convert_momentum")
    assert not planted.passed
    assert not _rows(planted)["bn.running_mean (running statistics)"]
    assert planted.verdicts()["jax"].startswith(
        "the running statistics differ first at `bn` (`bn.running_mean`"
    )


@pytest.mark.parametrize("dtype", ["bfloat16"])
def test_a_16_bit_check_compares_the_running_statistics_within_its_measured_rounding(dtype):
    healthy = crosscheck.check(_port("train"), quantity="output", reference="torch", dtype=dtype)
    assert healthy.passed, healthy.verdicts()
    assert _rows(healthy) == dict.fromkeys(STATISTICS, True)
    planted = crosscheck.check(_port("train_momentum"), quantity="output", reference="torch", dtype=dtype)
    assert not planted.passed
    assert not _rows(planted)["bn.running_mean (running statistics)"]
    assert planted.verdicts()["jax"].startswith(
        "the running statistics differ first at `bn` (`bn.running_mean`"
    )


def _port(name):
    from examples.port import unet

    return getattr(unet, name)


def test_a_statistic_sharing_a_converted_leaf_with_another_tensor_is_not_compared():
    """A conversion that stacks the mean and the variance into one leaf cannot tell their updates apart
    there: said, and the statistics fail as not compared (never paired by a guess)."""
    from types import SimpleNamespace

    from crosscheck._workloads.port.judge import running_convert

    def entry(torch_name, path):
        return SimpleNamespace(torch=SimpleNamespace(name=torch_name), jax=SimpleNamespace(path=path))

    own, stacked = ("batch_stats", "bn", "mean"), ("batch_stats", "bn", "stats")
    leaves = [SimpleNamespace(path=p) for p in (own, stacked)]

    def prepared(*rows):
        return SimpleNamespace(
            table=SimpleNamespace(mapped=lambda: rows), jax_side=SimpleNamespace(leaves=leaves)
        )

    paired, why = running_convert.positions(
        prepared(entry("bn.running_mean", own), entry("bn.running_var", stacked)),
        ["bn.running_mean", "bn.running_var"],
    )
    assert (paired, why) == ({"bn.running_mean": [0], "bn.running_var": [1]}, "")
    paired, why = running_convert.positions(
        prepared(entry("bn.running_mean", stacked), entry("bn.running_var", stacked)),
        ["bn.running_mean", "bn.running_var"],
    )
    assert "`bn.running_mean` makes the JAX leaf `batch_stats/bn/stats` together with `bn.running_var`" in why
