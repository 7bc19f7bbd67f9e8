"""A 16-bit check of a port says which side computed wider than the dtype asked (``port/judge/wide.py``):
a plain JAX function that upcasts to float32, a PyTorch module pinned to float32 (returning float32, or
casting back), and both at once. The port's loss projects the output in the case's dtype, so the
gradient alone cannot tell; the model output can. With no side computing in the dtype the check fails.
The forward check in 16 bits says what its rounding hides, as the gradient check does."""

from __future__ import annotations

import numpy as np
import pytest

import crosscheck

jax = pytest.importorskip("jax")
torch = pytest.importorskip("torch")


def _port(wide: tuple[str, ...], *, back: bool = True) -> crosscheck.Port:
    """A two-layer tanh MLP in PyTorch and as a JAX function; the sides in ``wide`` compute in float32
    (``back``: the PyTorch side casts its output back to the input's dtype)."""
    import jax.numpy as jnp

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc1, self.fc2 = torch.nn.Linear(4, 8), torch.nn.Linear(8, 3)

        def forward(self, x):
            if "torch" not in wide:
                return self.fc2(torch.tanh(self.fc1(x)))
            p = {k: v.float() for k, v in self.named_parameters()}
            h = torch.tanh(torch.nn.functional.linear(x.float(), p["fc1.weight"], p["fc1.bias"]))
            out = torch.nn.functional.linear(h, p["fc2.weight"], p["fc2.bias"])
            return out.to(x.dtype) if back else out

    def function(params, x):
        dtype = x.dtype
        if "jax" in wide:
            params, x = jax.tree.map(lambda a: a.astype(jnp.float32), params), x.astype(jnp.float32)
        h = jnp.tanh(x @ params["fc1"]["kernel"] + params["fc1"]["bias"])
        return (h @ params["fc2"]["kernel"] + params["fc2"]["bias"]).astype(dtype)

    torch.manual_seed(0)
    shapes = {"fc1": ((4, 8), (8,)), "fc2": ((8, 3), (3,))}
    params = {
        k: {"kernel": np.zeros(w, np.float32), "bias": np.zeros(b, np.float32)}
        for k, (w, b) in shapes.items()
    }
    x = np.random.default_rng(0).standard_normal((16, 4))
    return crosscheck.Port(name="wide", torch=Net().eval(), jax=function, jax_params=params, inputs={"x": x})


WIDE = {"none": (), "jax": ("jax",), "torch": ("torch",), "both": ("jax", "torch")}
CHECKS = {"oracle": {}, "torch-reference": {"reference": "torch", "backends": ["jax"]}}


def _said(report) -> str:
    jax_ = report.to_dict()["backends"]["jax"]
    verdict = report.backends["jax"].verdict
    return " ".join(
        [(jax_.get("notes", {}).get("port") or {}).get("text", ""), verdict.text if verdict else ""]
    )


@pytest.mark.parametrize("check", list(CHECKS), ids=list(CHECKS))
@pytest.mark.parametrize("wide", list(WIDE), ids=list(WIDE))
def test_a_side_that_computes_in_float32_is_named_and_with_neither_in_bfloat16_the_check_fails(wide, check):
    report = crosscheck.check(_port(WIDE[wide]), dtype="bfloat16", **CHECKS[check])
    said = _said(report)
    for side in ("jax", "torch"):
        assert (f"`{side}` computes in float32, not bfloat16" in said) == (side in WIDE[wide]), said
    if wide == "both":
        assert not report.passed
        assert any("no bfloat16 arithmetic was checked" in p for p in report.problems), report.problems
    else:
        assert report.passed, report.problems


def test_a_pytorch_module_that_returns_float32_in_a_bfloat16_check_is_named():
    report = crosscheck.check(
        _port(("torch",), back=False), dtype="bfloat16", reference="torch", backends=["jax"]
    )
    assert "`torch` computes in float32, not bfloat16" in _said(report)


@pytest.mark.parametrize("wide", list(WIDE), ids=list(WIDE))
def test_the_forward_check_in_bfloat16_says_what_it_cannot_see_and_names_a_wide_side(wide):
    report = crosscheck.check(
        _port(WIDE[wide]), dtype="bfloat16", quantity="output", reference="torch", backends=["jax"]
    )
    said = _said(report)
    assert "a bug that moves the module outputs by less is not seen in bfloat16: check in float32 too" in said
    for side in ("jax", "torch"):
        assert (f"`{side}` computes in float32, not bfloat16" in said) == (side in WIDE[wide]), said
    assert report.passed == (wide != "both"), report.problems
    if wide == "both":
        assert any("no bfloat16 arithmetic was checked" in p for p in report.problems), report.problems
