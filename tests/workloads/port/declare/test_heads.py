"""Head axes read in the order the values prove (``declare/heads.py``): a Flax ``DenseGeneral`` with
``features=(D, H)`` keeps its kernel ``(E, D, H)``, which fits PyTorch's ``(E, E)`` read heads first
as well as heads last; the port's output on the example inputs says which."""

from __future__ import annotations

import ast
import re

import pytest

import crosscheck

pytest.importorskip("torch")
pytest.importorskip("flax")

E, H, D = 8, 2, 4


def _torch():
    import torch
    from torch import nn

    class Attention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.q_proj, self.k_proj, self.v_proj, self.o_proj = (nn.Linear(E, E) for _ in range(4))

        def forward(self, x):
            b, s, _ = x.shape
            q, k, v = (f(x).view(b, s, H, D).transpose(1, 2) for f in (self.q_proj, self.k_proj, self.v_proj))
            y = torch.softmax(q @ k.transpose(-1, -2) / D**0.5, -1) @ v
            return self.o_proj(y.transpose(1, 2).reshape(b, s, E))

    torch.manual_seed(0)
    return nn.ModuleDict({"attn": Attention()}).eval()


def _flax(layout: str, wrong_query: bool = False, einsum: bool = False):
    import flax.linen as nn
    import jax
    import jax.numpy as jnp

    class WrongKernel(nn.DenseGeneral):  # a planted bug: the query's kernel read 1 % too large
        @nn.compact
        def __call__(self, x):
            kernel = self.param("kernel", nn.initializers.lecun_normal(), (x.shape[-1], *self.features))
            bias = self.param("bias", nn.initializers.zeros, self.features)
            return jnp.einsum("bse,e...->bs...", x, kernel * 1.01) + bias

    class Einsum(nn.Module):  # a kernel of one's own: no module says its layout
        features: tuple[int, int]

        @nn.compact
        def __call__(self, x):
            kernel = self.param("kernel", nn.initializers.lecun_normal(), (x.shape[-1], *self.features))
            bias = self.param("bias", nn.initializers.zeros, self.features)
            return jnp.einsum("bse,e...->bs...", x, kernel) + bias

    last = layout == "heads-last"
    features, axes = ((D, H), "dh") if last else ((H, D), "hd")

    class Attention(nn.Module):
        @nn.compact
        def __call__(self, x):
            query = WrongKernel if wrong_query else Einsum if einsum else nn.DenseGeneral
            q = query(features, name="q_proj")(x)
            k, v = (nn.DenseGeneral(features, name=n)(x) for n in ("k_proj", "v_proj"))
            a = axes
            w = jax.nn.softmax(jnp.einsum(f"bq{a},bk{a}->bhqk", q, k) / D**0.5, -1)
            y = jnp.einsum(f"bhqk,bk{a}->bq{a}", w, v)
            return nn.DenseGeneral(E, axis=(-2, -1), name="o_proj")(y)

    class Net(nn.Module):
        @nn.compact
        def __call__(self, x):
            return Attention(name="attn")(x)

    return Net()


def _port(layout: str, wrong_query: bool = False, overrides=None, einsum: bool = False):
    return crosscheck.Port(
        name=f"attention-{layout}",
        torch=_torch(),
        jax=_flax(layout, wrong_query, einsum),
        inputs=lambda rng, dtype: {"x": rng.standard_normal((2, 3, E)).astype(dtype)},
        torch_call=lambda module, inputs: module["attn"](inputs["x"]),
        overrides=overrides,
    )


def _verdict(port):
    report = crosscheck.run(workload=port, reference="torch", backends=["jax"], dtype="float64")
    return report, report.backends["jax"].notes["port"]


def test_a_heads_last_port_is_read_heads_last_proven_by_the_values_and_passes():
    port = _port("heads-last")
    rows = {e.torch.name: e for e in port.mapping.mapped()}
    assert rows["attn.q_proj.weight"].transform == "transpose, heads last"
    assert rows["attn.o_proj.weight"].transform == "transpose, heads last"
    assert rows["attn.q_proj.bias"].transform == "identity, heads last"
    assert rows["attn.o_proj.bias"].transform == "identity"  # no head axes
    assert "heads last, proven by the values" in rows["attn.q_proj.weight"].how
    report, _ = _verdict(port)
    assert report.passed, report.problems


def test_a_heads_first_port_is_read_as_before_and_passes():
    port = _port("heads-first")
    assert [e.transform for e in port.mapping.mapped()] == ["transpose", "identity"] * 4
    assert not any("proven" in e.how for e in port.mapping.mapped())
    report, _ = _verdict(port)
    assert report.passed, report.problems


def test_a_wrong_kernel_is_not_read_away_and_its_printed_override_fails_at_its_module():
    port = _port("heads-last", wrong_query=True)
    rows = port.mapping.mapped()
    assert all(e.transform is not None and "heads last" not in e.transform for e in rows)
    unproven = [e for e in rows if "not proven by the values" in e.how]
    assert len(unproven) == 7  # q, k, v kernels and biases, o's kernel: each says its override
    overrides = {}
    for e in unproven:
        printed = re.search(r"overrides=(\{.*\})$", e.how)
        assert printed is not None, e.how
        overrides.update(ast.literal_eval(printed.group(1)))
    pasted = _port("heads-last", wrong_query=True, overrides=overrides)
    assert pasted.mapping.problems() == []
    assert [e.transform for e in pasted.mapping.mapped()].count("transpose, heads last") == 4
    report, verdict = _verdict(pasted)
    assert not report.passed
    assert verdict["module"] == "attn.q_proj"
    healthy = _port("heads-last", overrides=overrides)  # the same override on the healthy port
    assert _verdict(healthy)[0].passed


def test_heads_last_where_no_axis_splits_into_heads_is_refused_in_one_line():
    bias = ("params/attn/o_proj/bias", "identity, heads last")  # a bias (E,) onto (E,): no head axes
    port = _port("heads-last", overrides={"attn.o_proj.bias": bias})
    with pytest.raises(ValueError, match=r"heads last only where an axis splits into head axes") as caught:
        port.mapping  # noqa: B018  (prepared when first asked for)
    assert "`attn.o_proj.bias`" in str(caught.value)


def test_an_einsum_kernel_refused_as_ambiguous_takes_the_transpose_and_its_heads_are_proven():
    # No module says the einsum kernel's layout: identity and transpose both fit (E, E) -> (E, D, H)
    port = _port("heads-last", einsum=True)
    (line,) = [p for p in port.mapping.problems() if "attn.q_proj.weight" in p]
    assert "identity and transpose both fit the shapes" in line
    printed = re.search(r"overrides=(\{.*?\})", line)
    assert printed is not None, line
    pasted = printed.group(1).replace("TRANSFORM", "'transpose'")
    decided = _port("heads-last", einsum=True, overrides=ast.literal_eval(pasted))
    rows = {e.torch.name: e for e in decided.mapping.mapped()}
    assert rows["attn.q_proj.weight"].transform == "transpose, heads last"
    assert _verdict(decided)[0].passed
