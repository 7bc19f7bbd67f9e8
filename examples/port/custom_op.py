"""A fused op with a hand-written backward on both sides: ``fc1`` (Linear) -> ``norm`` (RMSNorm, a
``torch.autograd.Function`` in PyTorch, a ``jax.custom_vjp`` in the Flax linen port) -> ``act`` (exact
GELU) -> ``fc2`` (Linear), on ``(B, T, 8)`` inputs; bugs planted in the JAX backward only (``BUGS``).

Every bug is in ``norm``'s backward: its forward is exact, so the forward check passes and only the
gradients differ. The gradient reaching ``norm``'s output agrees (``act`` and ``fc2`` are right), the one
leaving its input does not (or its weight's gradient does not); ``fc1`` and the GELU are innocent.
``eps_outside_sqrt`` changes the gradient by about 1e-7 relative: below float32's rounding of the
check, seen with ``--dtype float64``.

Run from the repository root::

    crosscheck run --workload examples.port.custom_op:port --reference torch
    crosscheck run --workload examples.port.custom_op:missing_term --reference torch
    crosscheck run --workload examples.port.custom_op:eps_outside_sqrt --reference torch --dtype float64
"""

from __future__ import annotations

from examples.port.planted import Planted

#: Input width, hidden width, output width, batch, tokens; RMSNorm's epsilon.
D_IN, HIDDEN, D_OUT, BATCH, TOKENS = 8, 16, 4, 2, 5
EPS = 1e-6


def torch_model():
    """The original, in eval mode: its RMSNorm is ``RMSNormFunction`` (forward and backward by hand)."""
    import torch

    from examples.port._custom_op_torch import TorchNet

    torch.manual_seed(0)
    model = TorchNet(D_IN, HIDDEN, D_OUT, EPS)
    with torch.no_grad():  # a trained norm's scale, not its init of ones
        model.norm.weight.uniform_(0.5, 1.5)
    return model.eval()


def flax_model(bug: str = ""):
    """The port; ``bug`` plants one of ``BUGS`` in the JAX backward of ``norm``."""
    from examples.port._custom_op_jax import FlaxNet

    return FlaxNet(HIDDEN, D_OUT, EPS, bug)


def tokens(rng, dtype):
    """A batch of ``BATCH`` sequences of ``TOKENS`` vectors of width ``D_IN``."""
    return {"x": rng.standard_normal((BATCH, TOKENS, D_IN)).astype(dtype)}


def convert(sd):
    """PyTorch's ``state_dict`` -> the Flax variables (hand-written, for scripts and tests)."""

    def dense(name):
        return {"kernel": sd[f"{name}.weight"].T, "bias": sd[f"{name}.bias"]}

    return {"params": {"fc1": dense("fc1"), "norm": {"scale": sd["norm.weight"]}, "fc2": dense("fc2")}}


def make_port(name="custom-op", bug=""):
    import crosscheck

    return crosscheck.Port(
        name=name,
        torch=torch_model(),
        jax=flax_model(bug),
        inputs=tokens,
        description="Linear -> RMSNorm (autograd.Function / jax.custom_vjp) -> GELU -> Linear",
    )


def _bug(what: str, bug: str, dtype: str = "float32") -> Planted:
    return Planted(what, "norm", dict(bug=bug), shows_in="gradient", dtype=dtype)


#: The planted bugs, each in the JAX backward of the custom op ``norm`` (its forward is exact).
BUGS = {
    "missing_term": _bug(
        "the input's gradient without its projection term: r * g*w, not r * (g*w - x^ mean(g*w * x^))",
        "missing_term",
    ),
    "wrong_sign": _bug("the projection term added, not subtracted", "wrong_sign"),
    "wrong_axis": _bug(
        "the projection term's mean taken over the tokens (axis -2), not the features (axis -1)", "wrong_axis"
    ),
    "weight_grad": _bug(
        "the scale's gradient sum(g * x), not sum(g * x * r): the normalisation left out", "weight_grad"
    ),
    "eps_outside_sqrt": _bug(
        "the backward recomputes r as 1 / (sqrt(mean(x^2)) + eps), not 1 / sqrt(mean(x^2) + eps): a "
        "change of about 1e-7 relative, seen in float64 only",
        "eps_outside_sqrt",
        dtype="float64",
    ),
}


def __getattr__(name):  # the ports are built when asked for: importing this module imports no framework
    if name == "port":
        return make_port()
    if name in BUGS:
        return make_port(f"custom-op-{name}".replace("_", "-"), **BUGS[name].change)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
