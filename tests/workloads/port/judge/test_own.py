"""The PyTorch side's own proof (``port/own.py``): a PyTorch forward that changes its weights, updates a
buffer in place or gives another result on a second call fails as the PyTorch side's failure, named
`torch`, and the JAX port is not blamed for it; one that writes to its input in place (Hugging Face's
XGLM) is judged, each call on its own copy of the inputs, and the write is a note naming the input."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import usercode

import crosscheck

pytestmark = [
    pytest.mark.skipif(importlib.util.find_spec(name) is None, reason=f"needs {name}")
    for name in ("flax", "torch")
]


@pytest.mark.parametrize("reference", [None, "torch"], ids=["oracle", "torch-reference"])
@pytest.mark.parametrize("forward", list(usercode.FORWARDS), ids=list(usercode.FORWARDS))
def test_a_misbehaving_pytorch_forward_names_torch_and_never_blames_jax(forward, reference):
    port = usercode.misbehaving_port(forward)
    options = {"reference": reference, "backends": ["jax"]} if reference else {}
    report = crosscheck.check(port, **options)
    assert not report.passed
    torch_ = report.to_dict()["backends"]["torch"]
    assert torch_["status"] == "failed"
    assert usercode.FORWARDS[forward] in torch_["error"]
    assert torch_["error"].startswith("the PyTorch module (`torch`)")
    jax = report.to_dict()["backends"]["jax"]
    said = (jax.get("notes", {}).get("port") or {}).get("text", "")
    assert "differs" not in said  # the port is not where a difference starts
    if reference is None:  # the port ran: its module comparison says why it did not happen
        assert "the PyTorch side failed its own check" in said
        assert "`jax` is not judged against it" in said
    else:
        assert jax["status"] == "skipped"


def test_the_healthy_pair_passes_the_proof():
    assert crosscheck.check(usercode.misbehaving_port("none")).passed


@pytest.mark.parametrize(
    ("reference", "quantity"),
    [(None, "grad"), ("torch", "grad"), ("torch", "output")],
    ids=["oracle", "torch-reference", "forward-check"],
)
def test_a_forward_that_writes_to_its_input_is_judged_and_the_write_noted(reference, quantity):
    """``position_ids += offset`` (XGLM's): every call has its own copy, so the port computes the same
    function on the same inputs and passes; the note names the input."""
    options = {"reference": reference, "backends": ["jax"]} if reference else {}
    report = crosscheck.check(usercode.writing_port(), quantity=quantity, **options)
    assert report.passed, report.problems
    said = report.to_dict()["backends"]["jax"]["notes"]["port"]["text"]
    assert "writes to its input `position_ids` in place" in said
    assert "own copy of the inputs" in said


def test_a_planted_bug_in_a_forward_that_writes_to_its_input_still_fails():
    """The copy makes the write harmless, not the port right: a port that forgets the offset differs."""
    report = crosscheck.check(usercode.writing_port(ported=0), reference="torch", backends=["jax"])
    assert not report.passed
    assert report.backends["torch"].status == "ok"
    said = report.to_dict()["backends"]["jax"]["notes"]["port"]["text"]
    assert "positions" in said and "writes to its input `position_ids`" in said


@pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="needs transformers")
def test_hugging_faces_xglm_which_writes_to_its_position_ids_is_judged():
    from examples.port.zoo import inputs, spec

    config = dict(vocab_size=64, d_model=8, num_layers=2, attention_heads=2, ffn_dim=16)
    quiet = dict(dropout=0.0, attention_dropout=0.0, activation_dropout=0.0, use_cache=False)
    arch = spec.Arch("xglm", "decoder", "XGLM", "xglm", {**config, **quiet, "init_std": 0.5}, inputs.text(64))
    report = crosscheck.check(spec.make_port(arch), reference="torch", backends=["jax"], dtype="float32")
    assert report.passed, report.problems
    said = report.to_dict()["backends"]["jax"]["notes"]["port"]["text"]
    assert "writes to its input `position_ids` in place" in said


#: Both float64 losses keep a float32 step; the JAX port has a real 3e-4 error plus float32-only noise
#: of ~450 float32 unit roundoffs (within what one rounding permits), or of ~1000 (where the permit of
#: two roundings, ``TWO_ROUNDINGS``, widens its rounding term).
PERTURBED = {"noise-450u": 2.7e-5, "noise-1000u-two-roundings": 6e-5}
ORDERS = {"jax-first": ["jax", "torch"], "torch-first": ["torch", "jax"]}


@pytest.mark.parametrize("order", list(ORDERS), ids=list(ORDERS))
@pytest.mark.parametrize("noise", list(PERTURBED), ids=list(PERTURBED))
def test_the_ports_own_rounding_never_makes_the_original_the_culprit(noise, order):
    import tanh_mlp

    port = tanh_mlp.float32_steps_port(error=3e-4, float32_only=PERTURBED[noise])
    report = crosscheck.check(port, dtype="float32", backends=ORDERS[order])
    assert not report.passed
    assert not [c.parameter for c in report.comparisons if c.backend == "torch" and not c.passed]
    assert report.backends["torch"].status == "ok"
    said = report.to_dict()["backends"]["jax"]["notes"]["port"]["text"]
    assert "agree" not in said.split("(")[0], said  # its verdict is not "every gradient agrees"
    assert any(p.startswith("`jax`") for p in report.problems), report.problems


@pytest.mark.parametrize("order", list(ORDERS), ids=list(ORDERS))
def test_the_healthy_float32_steps_port_passes(order):
    import tanh_mlp

    report = crosscheck.check(tanh_mlp.float32_steps_port(), dtype="float32", backends=ORDERS[order])
    assert report.passed, report.problems


def _upcasting_original_port(error: float) -> crosscheck.Port:
    """A PyTorch MLP whose forward keeps a float32 step in a float64 pass (Hugging Face's upcasts) and a
    clean JAX function port, its second kernel scaled by ``1 + error`` (0: healthy)."""
    import jax.numpy as jnp
    import torch

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc1, self.fc2 = torch.nn.Linear(4, 8), torch.nn.Linear(8, 3)

        def forward(self, x):
            return self.fc2(torch.tanh(self.fc1(x)).float().to(x.dtype))

    def function(params, x):
        h = jnp.tanh(x @ params["fc1"]["kernel"] + params["fc1"]["bias"])
        return h @ (params["fc2"]["kernel"] * (1 + error)) + params["fc2"]["bias"]

    torch.manual_seed(0)
    shapes = {"fc1": ((4, 8), (8,)), "fc2": ((8, 3), (3,))}
    params = {k: {"kernel": np.zeros(w), "bias": np.zeros(b)} for k, (w, b) in shapes.items()}
    x = np.random.default_rng(0).standard_normal((16, 4))
    return crosscheck.Port(
        name="upcast", torch=Net().eval(), jax=function, jax_params=params, inputs={"x": x}
    )


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_port_bug_is_never_blamed_on_an_original_whose_loss_keeps_float32_steps(dtype):
    """Only the port's float64 loss is clean: it was made the anchor of "same function", and the
    port's bug came out as "`torch` disagrees with `numpy-fd`". The original is the anchor."""
    report = crosscheck.check(_upcasting_original_port(1e-3), dtype=dtype)
    assert not report.passed
    assert not [c.parameter for c in report.comparisons if c.backend == "torch" and not c.passed]
    assert not any(p.startswith("`torch`") for p in report.problems), report.problems
    assert any(p.startswith("`jax` disagrees with `numpy-fd`") for p in report.problems), report.problems
    assert crosscheck.check(_upcasting_original_port(0.0), dtype=dtype).passed


def _pinned_original_port(error: float, backward: float = 1.0) -> crosscheck.Port:
    """A PyTorch MLP whose output leaves in float32 (its float64 loss cannot be differenced: the port's
    own loss anchors "same function"), its first layer's backward scaled by ``backward`` (1: right), and
    a clean JAX function port, its second kernel scaled by ``1 + error`` (0: healthy)."""
    import jax.numpy as jnp
    import torch

    class Scaled(torch.autograd.Function):  # the identity, its gradient scaled: a backward-only bug
        @staticmethod
        def forward(ctx, x):
            return x.clone()

        @staticmethod
        def backward(ctx, grad):
            return grad * backward

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc1, self.fc2 = torch.nn.Linear(4, 8), torch.nn.Linear(8, 3)

        def forward(self, x):
            return self.fc2(torch.tanh(Scaled.apply(self.fc1(x)))).float()

    def function(params, x):
        h = jnp.tanh(x @ params["fc1"]["kernel"] + params["fc1"]["bias"])
        return h @ (params["fc2"]["kernel"] * (1 + error)) + params["fc2"]["bias"]

    torch.manual_seed(0)
    shapes = {"fc1": ((4, 8), (8,)), "fc2": ((8, 3), (3,))}
    params = {k: {"kernel": np.zeros(w), "bias": np.zeros(b)} for k, (w, b) in shapes.items()}
    x = np.random.default_rng(0).standard_normal((16, 4))
    return crosscheck.Port(
        name="pinned", torch=Net().eval(), jax=function, jax_params=params, inputs={"x": x}
    )


def test_a_port_bug_is_never_blamed_on_an_original_whose_own_loss_cannot_be_differenced():
    """The original's loss comes back in float32: the port's own loss was the only function to judge its
    gradient against, and the port's bug came out as "`torch` disagrees with `numpy-fd`"."""
    report = crosscheck.check(_pinned_original_port(0.05))
    assert not report.passed
    assert not any(p.startswith("`torch` disagrees") or p.startswith("`torch`:") for p in report.problems)
    assert any(p.startswith("`jax`") for p in report.problems), report.problems
    said = report.verdicts()["torch"]
    assert "does not compute in float64" in said and "the difference is the port's" in said
    assert not report.backends["torch"].verdict.fails
    assert crosscheck.check(_pinned_original_port(0.0)).passed


def test_an_original_whose_own_loss_cannot_be_differenced_and_whose_gradient_differs_is_not_cleared():
    """A backward-only bug in PyTorch, its loss not differenced: the port's forward agrees, so which of
    the two is wrong is unknown, said, and the run fails."""
    report = crosscheck.check(_pinned_original_port(0.0, backward=1.05))
    assert not report.passed
    said = report.verdicts()["torch"]
    assert "which of the two is wrong is unknown" in said and report.backends["torch"].verdict.fails
    assert not any(p.startswith("`jax` disagrees") for p in report.problems), report.problems
