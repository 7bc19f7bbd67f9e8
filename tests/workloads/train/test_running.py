"""A train in training mode (``train/running.py``): the running statistics carried from step to step on
both sides (PyTorch's buffers, a linen module's ``batch_stats``) and compared after every step as the
parameters are, named by their module; a port whose JAX side cannot carry them is refused, never run
with them left uncompared."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

import crosscheck

pytestmark = pytest.mark.skipif(
    any(importlib.util.find_spec(m) is None for m in ("flax", "torch", "optax")),
    reason="needs flax, torch and optax",
)

STATISTICS = ("bn.running_mean (running statistics)", "bn.running_var (running statistics)")


def _run(name, steps=2):
    from examples.port import adam

    return crosscheck.run(workload=getattr(adam, name), quantity="update", steps=steps)


def _rows(report):
    return {str(c.parameter): c for c in report.comparisons if "running statistics" in str(c.parameter)}


def test_the_healthy_training_mode_train_compares_its_running_statistics_after_every_step():
    report = _run("adamw_train")
    assert report.passed, report.verdicts()
    rows = _rows(report)
    assert set(rows) == set(STATISTICS)
    assert all(c.passed and [r["step"] for r in c.per_layer] == [0, 1, 2] for c in rows.values())
    assert "and so do the running statistics of `bn`" in report.verdicts()["jax"]


def test_a_momentum_in_pytorch_s_convention_fails_at_bn_at_the_first_step_not_the_optimizer():
    report = _run("adamw_train_momentum")
    assert not report.passed
    text = report.verdicts()["jax"]
    assert text.startswith(
        "the running statistics differ first at step 1, at `bn` (`bn.running_mean`): the update of the "
        "running statistics differs"
    ), text
    assert "the optimizer is at fault" not in text
    record = report.backends["jax"].notes["update"]
    assert record["running_statistics"] == "bn.running_mean" and record["first_step"] == 1
    assert record["module"] == "bn"  # named as a port's verdict names it (`notes.port.module`)
    params = [c for c in report.comparisons if c.parameter and "(" not in str(c.parameter)]
    assert params and all(c.passed for c in params)  # batch statistics: the parameters cannot see it


def test_an_nnx_train_carries_its_batch_stat_variables_and_names_the_first_that_differs():
    """nnx's BatchNorm at PyTorch's momentum (0.9 in Flax's convention): the running mean agrees at every
    step, the running variance does not (Flax's takes the biased batch variance)."""
    from examples.port import convnet, convnet_nnx, optimizers

    model = convnet_nnx.nnx_model()
    model.bn1.momentum = 0.9
    model.train()
    port = crosscheck.Port(
        name="convnet-nnx-train",
        torch=convnet.torch_model().train(),
        jax=model,
        inputs=convnet.images,
        jax_inputs=lambda inputs: {"x": inputs["x"].transpose(0, 2, 3, 1)},
    )
    report = crosscheck.run(workload=optimizers.train(port, steps=2), quantity="update")
    rows = _rows(report)
    assert {k: c.passed for k, c in rows.items()} == {
        "bn1.running_mean (running statistics)": True,
        "bn1.running_var (running statistics)": False,
    }
    assert report.verdicts()["jax"].startswith(
        "the running statistics differ first at step 1, at `bn1` (`bn1.running_var`)"
    )


def test_a_train_whose_jax_side_cannot_carry_the_running_statistics_is_refused():
    """A function port has no collection to carry them in: refused in one line, never trained with
    its running statistics left uncompared."""
    import jax.numpy as jnp
    import torch

    from examples.port import optimizers

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc, self.bn = torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4)

        def forward(self, x):
            return self.bn(self.fc(x))

    def normalised(params, x):
        h = x @ params["fc"]["kernel"] + params["fc"]["bias"]
        return (h - h.mean(0)) / jnp.sqrt(h.var(0) + 1e-5) * params["bn"]["scale"] + params["bn"]["bias"]

    four = np.zeros(4, np.float32)
    tree = {
        "fc": {"kernel": np.zeros((3, 4), np.float32), "bias": four},
        "bn": {"scale": four, "bias": four, "mean": four, "var": four},
    }
    port = crosscheck.Port(
        name="function-train",
        torch=Net().train(),
        jax=normalised,
        jax_params=tree,
        inputs={"x": np.random.default_rng(0).standard_normal((8, 3))},
    )
    with pytest.raises(
        ValueError, match=r"updates running statistics \(`bn\.running_mean`\).*not for a function"
    ):
        crosscheck.run(workload=optimizers.train(port, steps=2), quantity="update")
