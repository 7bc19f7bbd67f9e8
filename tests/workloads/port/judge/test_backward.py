"""The backward localisation by cotangents (``judge/backward.py``): each planted bug of the custom op
example (``examples/port/custom_op.py``: an RMSNorm with a hand-written backward on both sides, the
bugs in the JAX backward) is named at ``norm``, as its backward and as a custom op; the healthy port
passes without the extra captures; a bug in a forward is located as before, without them; and the
pieces: the module picked in backward order, a capture that could not be made."""

from __future__ import annotations

import pytest

import crosscheck
from crosscheck._workloads.port.judge import backward
from crosscheck._workloads.port.judge.verdict import Origin

pytest.importorskip("torch")
pytest.importorskip("flax")


def _run(port, **options):
    return crosscheck.run(workload=port, backends=["jax"], **{"reference": "torch", **options})


@pytest.fixture
def captures(monkeypatch):
    """How many times both sides' cotangents were captured (``backward.chains``)."""
    made: list[int] = []
    original = backward.chains

    def counted(*args, **kwargs):
        made.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(backward, "chains", counted)
    return made


@pytest.mark.parametrize("name", ["missing_term", "wrong_sign", "wrong_axis", "weight_grad"])
def test_each_planted_backward_bug_is_named_at_norm_as_its_backward_and_a_custom_op(name, captures):
    from examples.port import custom_op

    report = _run(getattr(custom_op, name))
    verdict = report.backends["jax"].notes["port"]
    assert not report.passed
    assert (verdict["starts_in"], verdict["module"], verdict["suspects"]) == ("gradient", "norm", []), verdict
    assert (
        "the backward of `norm` (FusedRMSNorm) differs: the gradient reaching its output agrees"
        in verdict["text"]
    )
    leaving = (
        "its parameters' gradients do not" if name == "weight_grad" else "the one leaving its input does not"
    )
    assert leaving in verdict["text"]
    assert "`norm` is a custom op" in verdict["text"]
    assert "torch.autograd.Function `RMSNormFunction`" in verdict["text"]
    assert "jax.custom_vjp" in verdict["text"]
    assert captures == [1]


def test_a_planted_backward_bug_is_named_at_norm_under_the_default_reference(captures):
    from examples.port import custom_op

    report = crosscheck.run(workload=custom_op.wrong_sign)  # the finite-difference oracle of float64 losses
    verdict = report.backends["jax"].notes["port"]
    assert not report.passed
    assert (verdict["starts_in"], verdict["module"]) == ("gradient", "norm"), verdict
    assert "`norm` is a custom op" in verdict["text"]
    assert captures == [1]


def test_the_healthy_custom_op_passes_without_capturing_cotangents(captures):
    from examples.port import custom_op

    report = _run(custom_op.port)
    assert report.passed, report.problems
    assert captures == []


def test_a_bug_in_an_ordinary_forward_is_located_as_before_without_cotangents(captures):
    """The GELU computed with tanh's approximation in the port: a forward difference at `act` (a
    PyTorch module the port computes as a function), found by the module outputs alone."""
    import flax.linen as nn

    from examples.port import custom_op
    from examples.port._custom_op_jax import FusedRMSNorm

    class TanhGelu(nn.Module):
        @nn.compact
        def __call__(self, x):
            h = FusedRMSNorm(custom_op.EPS, name="norm")(nn.Dense(custom_op.HIDDEN, name="fc1")(x))
            return nn.Dense(custom_op.D_OUT, name="fc2")(nn.gelu(h, approximate=True))

    port = crosscheck.Port(
        name="tanh-gelu", torch=custom_op.torch_model(), jax=TanhGelu(), inputs=custom_op.tokens
    )
    verdict = _run(port).backends["jax"].notes["port"]
    assert (verdict["starts_in"], verdict["module"]) == ("forward", "act"), verdict
    assert captures == []


def test_the_first_module_in_backward_order_is_named_and_the_innermost_inside_it():
    order = ["head", "block", "block.norm", "block.fc", "embed"]  # backward order
    outs = {"head": True, "block": True, "block.norm": True, "block.fc": True, "embed": False}
    ins = {"head": True, "block": False, "block.norm": False, "block.fc": True, "embed": False}
    assert backward._first(order, outs.get, ins.get, set()) == "block.norm"
    assert backward._first(order, outs.get, {**ins, "block.norm": True}.get, set()) == "block"
    assert (
        backward._first(order, outs.get, {**ins, "block": True, "block.norm": True}.get, {"block.fc"})
        == "block.fc"
    )
    assert backward._first(order, {**outs, "block": None}.get, ins.get, set()) == "block.norm"
    assert backward._first(order, outs.get, dict.fromkeys(ins, True).get, set()) is None


def test_the_first_module_is_found_asking_only_what_the_answer_needs():
    """Nothing after the module found but the modules inside it; no input where the output differs or
    the module's own parameters' gradients do."""
    order = ["head", "block", "block.norm", "block.fc", "embed", "other.norm"]
    outs = {"head": False, "block": True, "block.norm": True, "block.fc": True, "embed": True}
    ins = {"head": True, "block": False, "block.norm": True, "block.fc": False, "embed": False}
    asked: list[tuple[str, str]] = []

    def spy(kind, values):
        return lambda name: asked.append((kind, name)) or values.get(name)

    found = backward._first(order, spy("out", outs), spy("in", ins), {"block.fc"})
    assert found == "block.fc"
    assert asked == [
        ("out", "head"),  # its output differs: its input is not asked
        ("out", "block"),
        ("in", "block"),  # found: only the modules inside it are asked further, `embed` never
        ("out", "block.norm"),
        ("in", "block.norm"),
        ("out", "block.fc"),  # its parameters' gradients differ: its input is not asked
    ]


def test_cotangents_not_captured_leave_the_verdict_by_parameters_and_say_why():
    fallback = Origin("gradient", "fc1", "fc1", ("act",), "the gradient differs first at `fc1`")
    found = backward.origin(
        backward.Chains(
            problem="they are captured for a Flax linen, nnx or Equinox port only, not a function"
        ),
        fallback,
        None,
        set(),
        name="jax",
        top="Net",
        dtype="float32",
    )
    assert (found.module, found.suspects) == ("fc1", ("act",))
    assert found.text == (
        "the gradient differs first at `fc1`; the gradients at each module's output and input were not "
        "compared: they are captured for a Flax linen, nnx or Equinox port only, not a function"
    )


@pytest.mark.parametrize("name", ["missing_term", "weight_grad"])
def test_each_planted_backward_bug_of_the_nnx_twin_is_named_at_norm_as_a_custom_op(name, captures):
    from examples.port import custom_op_nnx

    verdict = _run(getattr(custom_op_nnx, name)).backends["jax"].notes["port"]
    assert (verdict["starts_in"], verdict["module"], verdict["suspects"]) == ("gradient", "norm", []), verdict
    assert (
        "the backward of `norm` (FusedRMSNorm) differs: the gradient reaching its output agrees"
        in (verdict["text"])
    )
    assert "`norm` is a custom op" in verdict["text"] and "jax.custom_vjp" in verdict["text"]
    assert captures == [1]


@pytest.mark.parametrize("kind", ["linen", "nnx"])
def test_a_backward_bug_in_one_scanned_layer_is_named_at_that_layer_s_module(kind, captures):
    """Layer 2's linear with a wrong derivative only (``tests/support/scanned.py``, ``backward=True``):
    the scan's steps are perturbed one by one, and PyTorch's ``layers.2.linear`` is named, not the
    module around the scan."""
    from tests.support import scanned

    report, verdict = scanned.verdict(scanned.port(kind, bug_layer=2, backward=True))
    assert not report.passed
    assert (verdict["starts_in"], verdict["module"], verdict["suspects"]) == (
        "gradient",
        "layers.2.linear",
        [],
    ), verdict
    assert (
        "the backward of `layers.2.linear` (Linear) differs: the gradient reaching its output agrees, "
        "the one leaving its input and its parameters' gradients do not" in verdict["text"]
    )
    assert "custom op" not in verdict["text"]
    assert captures == [1]


def test_an_equinox_port_mapped_over_its_batch_keeps_the_verdict_by_parameters_and_says_why(captures):
    """``jax.vmap`` around the model, a scan inside it: no call is perturbed, so none is compared."""
    from tests.support import scanned

    report, verdict = scanned.verdict(scanned.port("equinox", bug_layer=2, backward=True))
    assert not report.passed
    assert (verdict["starts_in"], verdict["module"]) == ("gradient", "layers.2.linear"), verdict
    assert verdict["text"].endswith(
        "the gradients at each module's output and input were not compared: every submodule call of the "
        "Equinox module (`layers.linear`) runs under `jax.vmap`, where one example's zero would stand for "
        "the whole batch (call the model on the batch, mapping each module itself, `jax.vmap(self.fc1)(x)`, "
        "to have their gradients compared) (`jax` vs `torch`: module outputs and gradients)"
    ), verdict["text"]
    assert captures == [1]


@pytest.mark.parametrize("name", ["missing_term", "wrong_axis", "weight_grad"])
def test_each_planted_backward_bug_of_the_equinox_twin_is_named_at_norm_as_a_custom_op(name, captures):
    from examples.port import custom_op_equinox

    report = _run(getattr(custom_op_equinox, name))
    verdict = report.backends["jax"].notes["port"]
    assert not report.passed
    assert (verdict["starts_in"], verdict["module"], verdict["suspects"]) == ("gradient", "norm", []), verdict
    leaving = (
        "its parameters' gradients do not" if name == "weight_grad" else "the one leaving its input does not"
    )
    assert (
        f"the backward of `norm` (FusedRMSNorm) differs: the gradient reaching its output agrees, {leaving}"
        in verdict["text"]
    )
    assert "`norm` is a custom op" in verdict["text"] and "the port: jax.custom_vjp" in verdict["text"]
    assert captures == [1]


def test_a_planted_backward_bug_of_the_equinox_twin_is_named_at_norm_under_the_default_reference(captures):
    from examples.port import custom_op_equinox

    report = crosscheck.run(workload=custom_op_equinox.missing_term)
    verdict = report.backends["jax"].notes["port"]
    assert not report.passed
    assert (verdict["starts_in"], verdict["module"]) == ("gradient", "norm"), verdict
    assert "`norm` is a custom op" in verdict["text"]
    assert captures == [1]


def test_the_healthy_equinox_twin_passes_without_the_captures(captures):
    from examples.port import custom_op_equinox

    assert _run(custom_op_equinox.port).passed
    assert captures == []


def test_equinox_layers_mapped_by_jax_vmap_are_compared_on_the_batch_and_norm_named(captures):
    from examples.port import custom_op_equinox

    verdict = _run(custom_op_equinox.layers_vmapped).backends["jax"].notes["port"]
    assert (verdict["starts_in"], verdict["module"], verdict["suspects"]) == ("gradient", "norm", []), verdict
    assert "the backward of `norm` (FusedRMSNorm) differs" in verdict["text"]


def test_an_equinox_model_mapped_over_its_batch_says_why_no_gradient_at_a_module_is_compared(captures):
    from examples.port import custom_op_equinox

    verdict = _run(custom_op_equinox.model_vmapped).backends["jax"].notes["port"]
    assert verdict["starts_in"] == "gradient", verdict
    assert "the backward of" not in verdict["text"]
    assert (
        "were not compared: every submodule call of the Equinox module (`fc1`, `fc2`, `norm`) runs under "
        "`jax.vmap`" in verdict["text"]
    ), verdict["text"]


@pytest.mark.parametrize("bug_layer", [2, "all"])
def test_a_backward_bug_in_a_scanned_equinox_stack_is_named_at_its_layer(bug_layer, captures):
    """The Equinox stack called on the batch (``tests/support/scanned.py``, ``"equinox-batched"``):
    ``eqx.partition`` and ``eqx.combine`` rebuild each step's layer, whose calls are perturbed step by
    step and paired with PyTorch's ``layers.i.linear``; with the bug in every layer the last layer is
    the first, in backward order, whose backward differs."""
    from tests.support import scanned

    report, verdict = scanned.verdict(scanned.port("equinox-batched", bug_layer=bug_layer, backward=True))
    layer = "layers.2.linear" if bug_layer == 2 else "layers.3.linear"
    assert not report.passed
    assert (verdict["starts_in"], verdict["module"], verdict["suspects"]) == ("gradient", layer, []), verdict
    assert (
        f"the backward of `{layer}` (Linear) differs: the gradient reaching its output agrees, the one "
        "leaving its input and its parameters' gradients do not" in verdict["text"]
    )
    assert "custom op" not in verdict["text"]


def test_a_function_port_keeps_the_verdict_by_parameters_and_says_it_has_no_modules(captures):
    from examples.port import convnet_function

    verdict = _run(convnet_function.straight_through_relu).backends["jax"].notes["port"]
    assert verdict["starts_in"] == "gradient", verdict
    assert (
        "were not compared: they are captured for a Flax linen, nnx or Equinox port only, not a function (it "
        "has no "
        "modules: no edges to compare)" in verdict["text"]
    ), verdict["text"]


@pytest.mark.parametrize(
    ("name", "leaving"),
    [
        ("missing_term", "the one leaving its input does not"),
        ("nnx_weight_grad", "its parameters' gradients do not"),
    ],
)
def test_a_custom_op_bug_in_every_scanned_layer_is_named_at_the_last_layer_s_norm(name, leaving, captures):
    """``examples/port/custom_op_scanned.py``: the bug in every layer's norm (linen ``nn.scan``, nnx
    ``nnx.scan``); in backward order the last layer's norm is the first whose backward differs, and it
    is a custom op on both sides."""
    from examples.port import custom_op_scanned

    verdict = _run(getattr(custom_op_scanned, name)).backends["jax"].notes["port"]
    last = f"layers.{custom_op_scanned.L - 1}.norm"
    assert (verdict["starts_in"], verdict["module"], verdict["suspects"]) == ("gradient", last, []), verdict
    assert (
        f"the backward of `{last}` (FusedRMSNorm) differs: the gradient reaching its output agrees"
        in (verdict["text"])
    )
    assert leaving in verdict["text"]
    assert f"`{last}` is a custom op" in verdict["text"] and "jax.custom_vjp" in verdict["text"]
    assert captures == [1]


@pytest.mark.parametrize("name", ["port", "nnx_port"])
def test_the_healthy_scanned_custom_op_passes_without_capturing_cotangents(name, captures):
    from examples.port import custom_op_scanned

    report = _run(getattr(custom_op_scanned, name))
    assert report.passed, report.problems
    assert captures == []
