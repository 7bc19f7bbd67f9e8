"""A parameter whose gradient is zero by construction (an attention key's bias: softmax does not change
when a row is shifted) trained with AdamW on both sides: its update is rounding noise normalised by
itself, judged as such and named; weight decay on it is still judged; the coupled-L2 bug is weight
decay; a parameter the loss does not reach is skipped by PyTorch and decayed by optax, and that is said."""

from __future__ import annotations

import functools
import importlib.util

import numpy as np
import pytest

import crosscheck
from examples.port import adam

pytestmark = pytest.mark.skipif(
    any(importlib.util.find_spec(m) is None for m in ("flax", "torch", "optax")),
    reason="needs flax, torch and optax",
)

STEPS = 3


def _port(*, unused=False):
    """One attention layer over 6 tokens of 4 channels, then a linear head; ``unused``: a parameter
    the loss does not reach (``spare``), on both sides."""
    import flax.linen as nn
    import jax
    import torch

    class TorchAttention(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.q, self.k, self.v = (torch.nn.Linear(4, 4) for _ in range(3))
            self.head = torch.nn.Linear(4, 2)
            if unused:
                self.spare = torch.nn.Linear(4, 4)

        def forward(self, x):
            logits = self.q(x) @ self.k(x).transpose(-1, -2) / 2.0
            return self.head(torch.softmax(logits, dim=-1) @ self.v(x))

    class FlaxAttention(nn.Module):
        @nn.compact
        def __call__(self, x):
            q, k, v = (nn.Dense(4, name=n)(x) for n in ("q", "k", "v"))
            if unused:
                nn.Dense(4, name="spare")(x)
            logits = q @ jax.numpy.swapaxes(k, -1, -2) / 2.0
            return nn.Dense(2, name="head")(jax.nn.softmax(logits, axis=-1) @ v)

    torch.manual_seed(0)
    x = np.random.default_rng(0).standard_normal((2, 6, 4))
    return crosscheck.Port(
        name="attention", torch=TorchAttention().eval(), jax=FlaxAttention(), inputs={"x": x}
    )


def _train(*, weight_decay=adam.HYPER["weight_decay"], bug=None, **kwargs):
    return crosscheck.Train(
        _port(**kwargs),
        torch_optimizer=adam.torch_adamw,
        optax=functools.partial(adam.optax_adamw, bug=bug),
        hyper={**adam.HYPER, "weight_decay": weight_decay},
        steps=STEPS,
    )


@pytest.mark.parametrize("weight_decay", [adam.HYPER["weight_decay"], 0.0])
def test_healthy_adamw_passes_its_zero_gradient_judged_as_rounding(weight_decay):
    report = crosscheck.check(_train(weight_decay=weight_decay), quantity="update")
    record = report.backends["jax"].notes["update"]
    assert report.passed, (report.verdicts(), record)
    assert record["zero_gradient"] == ["k.bias"], record
    text = report.verdicts()["jax"]
    assert "the gradient of `k.bias` is zero within rounding" in text and "rounding noise normalised" in text


def test_the_coupled_l2_bug_is_weight_decay():
    report = crosscheck.check(_train(bug="coupled_l2"), quantity="update")
    record = report.backends["jax"].notes["update"]
    assert not report.passed
    assert record["gradients"] == "agree" and record["part"] == "weight decay", record
    assert "the update rule itself differs" not in report.verdicts()["jax"]


def _optax_sparing_the_key_bias(*, lr, betas, eps, weight_decay):
    """``optax.adamw`` decaying every leaf but the key's bias."""
    import jax
    import optax

    def mask(params):
        return jax.tree_util.tree_map_with_path(
            lambda path, _: "'k'" not in str(path) or "bias" not in str(path), params
        )

    return optax.adamw(lr, *betas, eps=eps, weight_decay=weight_decay, mask=mask)


def _torch_decaying_all(named, *, lr, betas, eps, weight_decay):
    import torch

    return torch.optim.AdamW([p for _, p in named], lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)


def test_weight_decay_on_a_zero_gradient_is_still_judged():
    train = crosscheck.Train(
        _port(),
        torch_optimizer=_torch_decaying_all,
        optax=_optax_sparing_the_key_bias,
        hyper=dict(adam.HYPER),
        steps=STEPS,
    )
    report = crosscheck.check(train, quantity="update")
    record = report.backends["jax"].notes["update"]
    assert not report.passed
    assert record["first_parameter"] == "k.bias" and record["part"] == "weight decay", record


def test_a_parameter_pytorch_skips_and_optax_decays_is_named():
    report = crosscheck.check(_train(unused=True), quantity="update")
    record = report.backends["jax"].notes["update"]
    assert not report.passed
    assert record["first_parameter"] == "spare.weight" and record["skipped"] == "spare.weight", record
    assert "its `.grad` is None" in report.verdicts()["jax"]
