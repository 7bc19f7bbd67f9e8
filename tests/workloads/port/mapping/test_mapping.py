"""A port's mapping on common layouts without overrides (a list's nesting), override patterns whose
wildcards reach the target, ``overrides={name: None}`` (unmapped: said, and not checked), and the
table a refused mapping prints on the command line."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

import crosscheck
from crosscheck._errors import DetailedError
from crosscheck._workloads.port.mapping import matching
from crosscheck._workloads.port.mapping import table as mapping
from crosscheck._workloads.port.mapping.matching import Tensor

needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch")


def T(name, shape, kind="parameter"):
    return Tensor(tuple(name.split(".")), shape, kind)


def J(path, shape):
    tokens = tuple(path.split("/"))
    return Tensor(tokens, shape, tokens[0], skip=1)


# ---- Axes of length 1 (Equinox's convolution bias) --------------------------------------------------


@pytest.mark.parametrize(
    ("torch", "jax", "fits"),
    [
        ((3,), (3, 1, 1), ["unit axes"]),  # Equinox Conv2d's bias against nn.Conv2d's
        ((1, 4), (4,), ["unit axes"]),
        ((3,), (3,), ["identity"]),  # the same shape is the identity, never a reshape
        ((2, 3), (3, 2, 1), []),  # the entries would move: not a reshape of axes of length 1
        ((6,), (2, 3), []),
    ],
)
def test_shapes_apart_by_axes_of_length_1_map_as_unit_axes(torch, jax, fits):
    assert matching.fits(T("conv.bias", torch), J("params/conv/bias", jax)) == fits


def test_a_unit_axes_override_that_does_not_apply_is_one_line():
    torch, jax = [T("conv.bias", (6,))], [J("params/conv/bias", (2, 3))]
    with pytest.raises(ValueError, match="`unit axes` does not apply to \\(6,\\) against \\(2, 3\\)"):
        mapping.build(torch, jax, {"conv.bias": ("params/conv/bias", "unit axes")})
    with pytest.raises(ValueError, match="`transpose` does not apply"):  # a 1-D tensor: no traceback
        mapping.build(torch, [J("params/conv/bias", (6,))], {"conv.bias": ("params/conv/bias", "transpose")})


# ---- A list's nesting ----------------------------------------------------------------------------------

NESTED = [
    # Flax: `self.layer = [...]` inside a module `layer` (Hugging Face's ResNet basic layer)
    ("list-in-namesake", "stages.0.layer.1.conv.weight", "params/stages/0/layer/layer_1/conv/kernel"),
    # Flax nn.Sequential against PyTorch's: `layers_0` where PyTorch has `0`
    ("sequential", "mlp.0.bias", "params/mlp/layers_0/bias"),
]


@pytest.mark.parametrize(("torch", "jax"), [c[1:] for c in NESTED], ids=[c[0] for c in NESTED])
def test_a_lists_nesting_maps_by_name(torch, jax):
    (entry,) = mapping.build([T(torch, (4,))], [J(jax, (4,))]).entries
    assert entry.status == "mapped" and "/".join(entry.jax.path) == jax
    assert entry.how.startswith("by name, a list's nesting aside")


def test_the_exact_spelling_wins_over_a_lists_nesting():
    jax = [J("params/layer/layer_0/b", (4,)), J("params/layer/0/b", (4,))]
    table = mapping.build([T("layer.0.b", (4,)), T("layer.layer.0.b", (4,))], jax)
    assert ["/".join(e.jax.path) for e in table.entries] == ["params/layer/0/b", "params/layer/layer_0/b"]
    assert [e.how for e in table.entries] == ["by name; same shape"] * 2


# ---- Weight norm ---------------------------------------------------------------------------------------


def test_weight_norms_parametrization_maps_onto_weight_g_and_weight_v_by_name():
    # torch.nn.utils.parametrizations.weight_norm: `original0` is the magnitude g, `original1` the direction v
    torch = [T(f"conv.parametrizations.weight.original{i}", s) for i, s in ((0, (1, 1, 3)), (1, (8, 4, 3)))]
    jax = [J("params/conv/weight_v", (8, 4, 3)), J("params/conv/weight_g", (1, 1, 3))]
    table = mapping.build(torch, jax)
    assert not table.problems()
    assert ["/".join(e.jax.path) for e in table.entries] == ["params/conv/weight_g", "params/conv/weight_v"]
    assert "weight norm: `original0` is `weight_g`" in table.entries[0].how


def test_an_original_outside_a_parametrization_is_not_read_as_weight_norm():
    table = mapping.build([T("conv.original0", (3,))], [J("params/conv/weight_g", (3,))])
    assert table.problems()


def test_indices_are_never_read_as_a_lists_nesting():
    table = mapping.build([T("blocks.0.0.1.b", (4,))], [J("params/blocks/0/1/b", (4,))])
    assert table.problems()  # `0.0.1` is not `0.1`: no index is dropped


# ---- Override patterns with groups ---------------------------------------------------------------------

LAYERS = [T(f"layer.{i}.conv.weight", (4, 4)) for i in range(3)]
LAYERS_JAX = [J(f"params/blocks/b{i}/conv/kernel", (4, 4)) for i in range(3)]


def test_a_patterns_wildcards_reach_the_target():
    table = mapping.build(
        LAYERS, LAYERS_JAX, {"layer.*.conv.weight": ("params/blocks/b*/conv/kernel", "transpose")}
    )
    assert [("/".join(e.jax.path), e.transform) for e in table.entries] == [
        (f"params/blocks/b{i}/conv/kernel", "transpose") for i in range(3)
    ]
    assert not table.problems()


def test_numbered_wildcards_may_reorder():
    torch = [T(f"a{i}.b{j}.w", (2,)) for i in range(2) for j in range(3)]
    jax = [J(f"params/x{j}/y{i}/w", (2,)) for i in range(2) for j in range(3)]
    table = mapping.build(torch, jax, {"a*.b*.w": "params/x{2}/y{1}/w"})
    assert [(e.torch.name, "/".join(e.jax.path)) for e in table.entries] == [
        (f"a{i}.b{j}.w", f"params/x{j}/y{i}/w") for i in range(2) for j in range(3)
    ]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"layer.0.conv.weight": "params/blocks/b*/conv/kernel"}, "refers to wildcard 1, the pattern has 0"),
        (
            {"layer.*.conv.weight": "params/blocks/b{2}/conv/kernel"},
            "refers to wildcard 2, the pattern has 1",
        ),
        (
            {"layer.*.conv.weight": "params/blocks/c*/conv/kernel"},
            "no JAX leaf `params/blocks/c0/conv/kernel`",
        ),
    ],
    ids=["no-wildcard", "too-few", "no-such-leaf"],
)
def test_a_target_that_does_not_resolve_is_one_line(overrides, message):
    with pytest.raises(ValueError, match="override") as info:
        mapping.build(LAYERS, LAYERS_JAX, overrides)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_glob_sets_and_single_characters_still_match():
    table = mapping.build(LAYERS, LAYERS_JAX, {"layer.[!2].conv.weig?t": None})
    assert [e.status for e in table.entries[:3]] == ["unmapped", "unmapped", "unmatched"]


# ---- Left unmapped: said, and not checked --------------------------------------------------------------


def _port(overrides):
    import torch

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(3, 2)
            self.extra = torch.nn.Linear(2, 2)  # a head the port does not have (and the loss does not use)

        def forward(self, x):
            return self.fc(x)

    torch.manual_seed(0)
    tree = {"fc": {"w": np.zeros((3, 2)), "b": np.zeros(2)}}
    return crosscheck.Port(
        name="extra",
        torch=Net().eval(),
        jax=lambda p, x: x @ p["fc"]["w"] + p["fc"]["b"],
        jax_params=tree,
        inputs={"x": np.random.default_rng(0).standard_normal((4, 3))},
        overrides=overrides,
    )


@needs_torch
def test_a_tensor_without_counterpart_is_refused_unless_left_unmapped():
    with pytest.raises(DetailedError, match=r"PyTorch parameter `extra.weight` \(2, 2\) is unmatched"):
        crosscheck.run(workload=_port(None), reference="torch")
    port = _port({"extra.*": None})
    rows = {r["torch"]: r for r in port.mapping.rows()}
    assert rows["extra.bias"]["status"] == "unmapped" and "not checked" in rows["extra.bias"]["how"]
    assert "UNMAPPED" in str(port.mapping)


@needs_torch
def test_an_unmapped_parameter_is_said_and_not_checked(capsys):
    from rich.console import Console

    report = crosscheck.run(workload=_port({"extra.*": None}), reference="torch", backends=["jax"])
    assert report.passed, report.problems
    assert report.oracle["not_checked"] == {
        "extra.weight": "left unmapped by an override",
        "extra.bias": "left unmapped by an override",
    }
    assert not any("extra" in (c.parameter or "") for c in report.comparisons)
    report.render(Console(width=200, force_terminal=False))
    out = capsys.readouterr().out
    assert "not checked: 2 PyTorch parameters left unmapped by an override" in out
    assert "(2 not checked)" in out.splitlines()[-1]  # the PASSED line says it too
    strict = crosscheck.run(
        workload=_port({"extra.*": None}), reference="torch", backends=["jax"], strict=True
    )
    assert not strict.passed and "left unmapped by an override" in strict.problems[-1]


@needs_torch
def test_a_port_with_every_parameter_unmapped_is_refused():
    import dataclasses

    port = dataclasses.replace(_port({"*": None}), jax=lambda p, x: x[:, :2], jax_params={})
    with pytest.raises(ValueError, match="no PyTorch parameter is mapped, so nothing would be checked"):
        crosscheck.run(workload=port, reference="torch")


@needs_torch
def test_a_port_whose_parameters_do_not_require_grad_is_refused_saying_why():
    """Frozen parameters are constants of the check, not parameters: the refusal says so."""
    port = _port({})
    port.torch.requires_grad_(False)
    with pytest.raises(ValueError, match="no PyTorch parameter is mapped") as raised:
        crosscheck.run(workload=port, reference="torch")
    message = str(raised.value)
    assert "do not require grad (`requires_grad_(False)`)" in message, message
    assert "call `requires_grad_(True)` on the module you pass" in message


# ---- A refused mapping on the command line -------------------------------------------------------------


@needs_torch
def test_the_command_line_prints_the_table_of_a_refused_mapping(monkeypatch, capsys, tmp_path):
    from crosscheck._cli.main import main

    # A module on disk: the port runs in a worker process, which sends the table back with the error.
    (tmp_path / "refused_port_module.py").write_text(
        "from tests.workloads.port.mapping.test_mapping import _port\nport = _port(None)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert main(["run", "--workload", "refused_port_module:port", "--reference", "torch"]) == 2
    captured = capsys.readouterr()
    err, out = captured.err.strip().splitlines(), captured.out.splitlines()
    assert len(err) == 3 and err[0] == (
        "crosscheck: error: port `extra`: 2 problems, each to fix before it is checked "
        "(print(port.mapping) shows the table):"
    )
    assert err[1].startswith("  - PyTorch parameter `extra.weight` (2, 2) is unmatched")
    assert err[2].startswith("  - PyTorch parameter `extra.bias` (2,) is unmatched")
    assert out[0] == "the mapping has 2 problems (their rows first):"
    assert out[2].startswith("extra.weight (2, 2)") and "UNMATCHED" in out[2]
    assert out[3].startswith("extra.bias (2,)")
    assert out[4].startswith("fc.weight (2, 3)") and "transpose" in out[4]


def test_a_long_refused_table_shows_every_problem_then_counts_the_rest():
    torch = [T(f"h.{i}.b", (2,)) for i in range(50)] + [T("odd.w", (3,))]
    table = mapping.build(torch, [J(f"params/h/{i}/b", (2,)) for i in range(50)])
    lines = table.refused(others=10).splitlines()
    assert lines[2].startswith("odd.w (3,)") and lines[-1] == "... and 40 rows more without a problem"
    assert len(lines) == 2 + 1 + 10 + 1


def test_a_long_mapping_in_a_report_shows_what_a_reader_must_see_and_counts_the_rest():
    torch = [T(f"h.{i}.b", (2,)) for i in range(50)] + [T(f"h.{i}.w", (3, 2)) for i in range(50)]
    torch += [T("bn.num_batches_tracked", (), kind="buffer"), T("h.0.c.weight", (4, 4))]
    jax = [J(f"params/h/{i}/b", (2,)) for i in range(50)] + [J(f"params/h/{i}/w", (2, 3)) for i in range(50)]
    jax += [J("params/h/0/c/kernel", (4, 4))]
    rows = mapping.build(torch, jax, {"h.0.c.weight": "transpose"}).rows()
    assert mapping.render_summary(rows[:5]) == mapping.render(rows[:5])  # a short one: every row
    lines = mapping.render_summary(rows).splitlines()
    assert len(lines) == 3 and "by override" in lines[1]
    assert lines[2] == (
        "mapping of 102 rows: 50 identity, 50 transpose, 1 buffers the JAX model does not use "
        "(every row: the JSON report's case.mapping)"
    )
