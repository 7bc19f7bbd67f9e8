"""A constant the original keeps in float32 (a sinusoidal position table, as Hugging Face's PyTorch
Marian, Pegasus, RoFormer and XGLM store theirs) where the port builds it in float64: a float32 check
judges "same function" at float32's resolution and passes; a float64 check names the constant as a part
the original computes in float32 by design, judges it and what it feeds at float32's rounding, and
passes (``by_design``); a real difference in the table fails in both."""

from __future__ import annotations

import numpy as np
import pytest

import crosscheck

torch = pytest.importorskip("torch")
jax = pytest.importorskip("jax")
nn = pytest.importorskip("flax.linen")

B, S, D = 2, 6, 8
X = {"x": np.random.default_rng(0).standard_normal((B, S, 4))}


def table(dtype, base=10000.0):
    """A sinusoidal position table ``(S, D)`` computed in NumPy's float64, stored as ``dtype``."""
    pos = np.arange(S)[:, None] * np.exp(-np.log(base) * np.arange(0, D, 2) / D)[None, :]
    out = np.zeros((S, D), dtype)
    out[:, 0::2], out[:, 1::2] = np.sin(pos), np.cos(pos)
    return out


def sinusoidal_port(base=10000.0):
    """PyTorch: ``fc1``, ``pos`` (adds its float32 table buffer), tanh, ``fc2``; Flax: the same, its
    table built in float64 (float32 when x64 is off), as Flax's Marian builds it. ``base``: the port's
    frequency base (a planted bug where it is not 10000)."""
    import jax.numpy as jnp

    class Pos(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("table", torch.tensor(table(np.float32)))

        def forward(self, h):
            return h + self.table

    class TorchNet(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.pos, self.fc2 = torch.nn.Linear(4, D), Pos(), torch.nn.Linear(D, 2)

        def forward(self, x):
            return self.fc2(torch.tanh(self.pos(self.fc1(x))))

    class FlaxPos(nn.Module):
        def __call__(self, h):
            return h + jnp.asarray(table(np.float64, base))

    class FlaxNet(nn.Module):
        def setup(self):
            self.fc1, self.pos, self.fc2 = nn.Dense(D), FlaxPos(), nn.Dense(2)

        def __call__(self, x):
            return self.fc2(jnp.tanh(self.pos(self.fc1(x))))

    torch.manual_seed(0)
    return crosscheck.Port(name="sinusoidal", torch=TorchNet().eval(), jax=FlaxNet(), inputs=X)


def _jax_line(report):
    (line,) = [v for v in report.oracle["verdict"] if v.startswith("`jax`")]
    return line


def test_a_float32_check_judges_same_function_at_float32s_resolution():
    # before: "`jax`'s float64 loss differs from `torch`'s own float64 loss's: ... difference 8.22e-10,
    # tolerance 5.47e-15", with no location (every module output and gradient agreed)
    report = crosscheck.run(workload=sinusoidal_port(), dtype="float32")
    assert report.passed, report.problems
    line = _jax_line(report)
    assert "same function as `torch`" in line
    assert "the float64 losses agree at float32's resolution, the check's" in line
    assert "a constant one side keeps in float32?" in line


@pytest.mark.parametrize("reference", ["torch", "numpy-fd"])
def test_a_float64_check_names_the_constant_kept_in_float32_and_judges_it_at_float32s_rounding(reference):
    # before: FAILED at `pos` ("a float32 constant in a float64 check ...; build it in float64 on the
    # PyTorch side to check in float64, or check in float32"): the original cannot be changed
    report = crosscheck.run(workload=sinusoidal_port(), dtype="float64", reference=reference)
    assert report.passed, report.problems
    verdict = report.backends["jax"].notes["port"]
    assert verdict["starts_in"] == "nowhere"
    said = (
        "the original computes in float32 by design: `pos` (it holds `pos.table`, constants kept in float32)"
    )
    assert said in verdict["text"] and "judged at float32's rounding" in verdict["text"]


def test_a_real_difference_in_the_table_still_fails_and_is_no_float32_constant():
    report = crosscheck.run(workload=sinusoidal_port(base=1000.0), dtype="float32")
    assert not report.passed
    assert report.backends["jax"].notes["port"]["module"] == "pos"
    report = crosscheck.run(workload=sinusoidal_port(base=1000.0), dtype="float64", reference="torch")
    verdict = report.backends["jax"].notes["port"]
    assert not report.passed and verdict["module"] == "pos"
    assert "a constant the original keeps in float32" not in verdict["text"]
