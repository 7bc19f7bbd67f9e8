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
#: As many heads as their width: the head axes' sizes alone cannot tell a query from an output kernel.
SQUARE = 16, 4, 4


def _torch(sizes=(E, H, D)):
    e, h, d = sizes
    import torch
    from torch import nn

    class Attention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.q_proj, self.k_proj, self.v_proj, self.o_proj = (nn.Linear(e, e) for _ in range(4))

        def forward(self, x):
            b, s, _ = x.shape
            q, k, v = (f(x).view(b, s, h, d).transpose(1, 2) for f in (self.q_proj, self.k_proj, self.v_proj))
            y = torch.softmax(q @ k.transpose(-1, -2) / d**0.5, -1) @ v
            return self.o_proj(y.transpose(1, 2).reshape(b, s, e))

    torch.manual_seed(0)
    return nn.ModuleDict({"attn": Attention()}).eval()


def _flax(layout: str, wrong_query: bool = False, einsum: bool = False, sizes=(E, H, D)):
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

    e, h, d = sizes
    last = layout in ("heads-last", "queries-last")
    features, axes = ((d, h), "dh") if last else ((h, d), "hd")
    # "queries-last": the queries, keys and values heads last, the output projection over heads first.
    out = "hd" if layout == "queries-last" else axes

    class Attention(nn.Module):
        @nn.compact
        def __call__(self, x):
            query = WrongKernel if wrong_query else Einsum if einsum else nn.DenseGeneral
            q = query(features, name="q_proj")(x)
            k, v = (nn.DenseGeneral(features, name=n)(x) for n in ("k_proj", "v_proj"))
            a = axes
            w = jax.nn.softmax(jnp.einsum(f"bq{a},bk{a}->bhqk", q, k) / d**0.5, -1)
            y = jnp.einsum(f"bhqk,bk{a}->bq{out}", w, v)
            return nn.DenseGeneral(e, axis=(-2, -1), name="o_proj")(y)

    class Net(nn.Module):
        @nn.compact
        def __call__(self, x):
            return Attention(name="attn")(x)

    return Net()


def _port(
    layout: str, wrong_query: bool = False, overrides=None, einsum: bool = False, sizes=(E, H, D), seq=3
):
    return crosscheck.Port(
        name=f"attention-{layout}",
        torch=_torch(sizes),
        jax=_flax(layout, wrong_query, einsum, sizes),
        inputs=lambda rng, dtype: {"x": rng.standard_normal((2, seq, sizes[0])).astype(dtype)},
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


@pytest.mark.parametrize("order", ["heads last", "heads first"])
def test_a_head_order_where_no_axis_splits_into_heads_is_refused_in_one_line(order):
    bias = ("params/attn/o_proj/bias", f"identity, {order}")  # a bias (E,) onto (E,): no head axes
    port = _port("heads-last", overrides={"attn.o_proj.bias": bias})
    with pytest.raises(ValueError, match=rf"{order} only where an axis splits into head axes") as caught:
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


def test_queries_heads_last_over_an_output_heads_first_with_as_many_heads_as_width_are_proven():
    # (E, D, H) query kernels and an (H, D, E) output kernel, H == D: the same head sizes, read apart
    # because they split other axes of their PyTorch tensors (output features, input features).
    port = _port("queries-last", sizes=SQUARE)
    rows = {e.torch.name: e for e in port.mapping.mapped()}
    for name in ("q_proj.weight", "k_proj.weight", "v_proj.weight"):
        assert rows[f"attn.{name}"].transform == "transpose, heads last"
        assert "heads last, proven by the values" in rows[f"attn.{name}"].how
    assert rows["attn.q_proj.bias"].transform == "identity, heads last"
    assert rows["attn.o_proj.weight"].transform == "transpose"  # heads first
    assert not any("not proven" in e.how for e in port.mapping.mapped())
    report, _ = _verdict(port)
    assert report.passed, report.problems


def test_readings_the_values_cannot_tell_apart_are_refused_not_guessed():
    # One token: attention is the value projection alone, so reading the values' and the output's heads
    # both the other way agrees too (and the queries and keys do not count at all).
    port = _port("queries-last", sizes=SQUARE, seq=1)
    problems = port.mapping.problems()
    assert len(problems) == 7, problems  # q, k, v kernels and biases, o's kernel
    assert all("the head order is not decided by the values: 2 readings" in line for line in problems)
    (line,) = [p for p in problems if p.startswith("`attn.o_proj.weight`")]
    assert "TRANSFORM one of 'transpose, heads first', 'transpose, heads last'" in line
    with pytest.raises(ValueError, match=r"is ambiguous: .* not decided by the values"):
        _verdict(port)
    # Either reading, said in the printed override, is then taken as said and checked.
    printed = re.search(r"overrides=(\{'attn.o_proj.weight': \(.*?\)\})", line)
    assert printed is not None, line
    for order in ("heads first", "heads last"):
        said = ast.literal_eval(printed.group(1).replace("TRANSFORM", f"'transpose, {order}'"))
        decided = _port("queries-last", sizes=SQUARE, seq=1, overrides=said)
        assert decided.mapping.problems() == []
        rows = {e.torch.name: e.transform for e in decided.mapping.mapped()}
        assert rows["attn.o_proj.weight"] == f"transpose, {order}"
        assert rows["attn.v_proj.weight"] == "transpose" + (", heads last" if order == "heads first" else "")
        assert _verdict(decided)[0].passed
