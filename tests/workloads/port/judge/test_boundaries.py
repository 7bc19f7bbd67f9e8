"""Modules cut apart differently (issue 37, item 8): Hugging Face's PyTorch XGLM scales its embedding
by sqrt(d_model) inside its embedding module, Flax right after ``nn.Embed``. The module outputs differ
by that factor while the model's output and every gradient agree: said, with the factor, and not a
failure; a difference that reaches the output still fails and is located."""

from __future__ import annotations

import math

import numpy as np
import pytest

import crosscheck
from crosscheck._compare.record import Comparison
from crosscheck._workloads.port.judge import boundaries

torch = pytest.importorskip("torch")
jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
nn = pytest.importorskip("flax.linen")

V, S, H = 6, 5, 8


def tokens(rng, dtype):
    return {"ids": rng.integers(0, V, size=(2, S)).astype(np.int32)}


class ScaledEmbedding(torch.nn.Embedding):
    """XGLM's ``XGLMScaledWordEmbedding``: the scale inside the embedding module."""

    def forward(self, ids):
        return super().forward(ids) * math.sqrt(H)


class TorchModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = ScaledEmbedding(V, H)
        self.fc = torch.nn.Linear(H, 3)

    def forward(self, ids):
        return self.fc(torch.tanh(self.embed(ids)))


class FlaxModel(nn.Module):
    """The port: the scale right after ``nn.Embed`` (``scale``: a planted bug when it is not sqrt(H))."""

    scale: float = math.sqrt(H)

    @nn.compact
    def __call__(self, ids):
        x = nn.Embed(V, H, name="embed")(ids) * self.scale
        return nn.Dense(3, name="fc")(jnp.tanh(x))


def _port(scale: float = math.sqrt(H)):
    torch.manual_seed(0)
    return crosscheck.Port(name="scaled", torch=TorchModel().eval(), jax=FlaxModel(scale), inputs=tokens)


@pytest.mark.parametrize(
    ("reference", "dtype"), [("torch", "float32"), ("torch", "float64"), (None, "float32")]
)
def test_a_step_on_the_other_side_of_a_modules_edge_is_said_with_its_factor_and_passes(reference, dtype):
    options = {"reference": reference} if reference else {}
    report = crosscheck.run(workload=_port(), backends=["jax"], dtype=dtype, **options)
    assert report.passed, report.problems
    (edge,) = [c for c in report.comparisons if c.status == "boundary"]
    assert edge.module == "embed" and edge.passed
    verdict = report.verdicts()["jax"]
    assert "`embed` by a factor: PyTorch's = the port's x 2.82843 (sqrt(8))" in verdict
    assert "cut their modules differently" in verdict


def test_a_wrong_scale_reaches_the_output_and_still_fails_at_the_module():
    report = crosscheck.run(workload=_port(scale=2.0), reference="torch", backends=["jax"])
    assert not report.passed
    assert not [c for c in report.comparisons if c.status == "boundary"]
    assert report.verdicts()["jax"].startswith("the forward pass differs first at `embed`")


def _row(module: str, passed: bool, status: str = "mismatch") -> Comparison:
    return Comparison("jax", "torch", passed, status, 1, parameter=f"{module} (output)", module=module)


GRADIENTS = [Comparison("jax", "torch", True, "ok", 4, parameter="fc.weight")]


@pytest.mark.parametrize(
    ("outputs", "gradients"),
    [
        ({"": False, "embed": False}, GRADIENTS),  # the model's output differs
        (
            {"": True, "embed": False},
            [Comparison("jax", "torch", False, "mismatch", 4)],
        ),  # a gradient differs
        ({"": True, "embed": False}, [Comparison("jax", "torch", False, "unjudgeable", 4)]),  # none judged
        ({"": True, "embed": False}, []),  # no gradient at all
        ({"embed": False}, GRADIENTS),  # the model's output was not compared
    ],
    ids=["output-differs", "gradient-differs", "gradient-unjudged", "no-gradient", "no-output"],
)
def test_an_edge_needs_the_output_and_every_gradient_judged_and_agreeing(outputs, gradients):
    rows = [_row("embed", False)]
    out, edges = boundaries.apart(rows, dict(outputs), {"embed": None}, gradients)
    assert out == rows and edges == []


def test_factor_is_found_only_where_one_output_is_a_multiple_of_the_other():
    rng = np.random.default_rng(0)
    j = rng.normal(size=(3, 4))
    assert boundaries.factor(j * 2.5, j) == pytest.approx(2.5)
    assert boundaries.factor(j * 2.5 + 1e-2, j) is None
    assert boundaries.factor(j, np.zeros_like(j)) is None
    assert boundaries.said(math.sqrt(32)) == "5.65685 (sqrt(32))"
    assert boundaries.said(2.5) == "2.5"
