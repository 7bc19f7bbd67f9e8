"""A candidate's rounding from its re-run in the other precision (``rerun.rounding``): a failed re-run is
said, and in a float64 case whose float64 loss keeps float32 steps the rounding is float32's (the
measured difference unscaled), said; the oracle's probe decides where it ran, else the side's own."""

from __future__ import annotations

import dataclasses
import types

import numpy as np
import pytest

from crosscheck._compare.constants import WIDEN
from crosscheck._workloads.model import rerun
from crosscheck._workloads.model.rounding import Rounding
from crosscheck._workloads.protocol import Point

DELTA = {"w": np.full((2, 2), 1e-7)}


class _Own:
    """The run's own losses as ``rounding`` asks them: the oracle's probe (``probed``) and the side's."""

    def __init__(self, *, probed: bool, side: bool) -> None:
        self.probed, self.side, self.asked = probed, side, []

    def probed_float32(self, name):
        self.asked.append(f"probed {name}")
        return self.probed

    def keeps_float32(self, backend, side, call):
        self.asked.append(f"side {side}")
        return self.side

    def steps(self, backend, name, call, *, oracle):
        return self.side


def _rounding(monkeypatch, own, *, dtype="float64", oracle=True, said=None) -> Rounding:
    outcome = types.SimpleNamespace(value={"w": np.zeros((2, 2))}, ok=said is None)
    monkeypatch.setattr(rerun, "rerun", lambda backend, point, other, name, call: (outcome, said, None))

    def measure(value, again, *, steps, **kwargs):
        assert callable(steps)  # handed on, asked only where a parameter needs it
        return Rounding(DELTA, DELTA, "measured")

    monkeypatch.setattr(rerun, "measure", measure)
    point = Point({"w": np.zeros((2, 2))}, {}, {}, dtype)
    backend = types.SimpleNamespace(name="jax")
    return rerun.rounding(backend, {}, "jax", None, point=point, shapes={"w": (2, 2)}, own=own, oracle=oracle)


@pytest.mark.parametrize(
    ("oracle", "probed", "side", "asked"),
    [(True, True, False, ["probed jax"]), (False, False, True, ["side jax"])],
    ids=["the-oracles-probe", "the-sides-probe"],
)
def test_a_float64_loss_with_float32_steps_has_float32s_rounding(monkeypatch, oracle, probed, side, asked):
    own = _Own(probed=probed, side=side)
    found = _rounding(monkeypatch, own, oracle=oracle)
    assert own.asked == asked
    assert np.allclose(np.asarray(found.term["w"]), DELTA["w"] / WIDEN)
    assert np.allclose(np.asarray(found.delta["w"]), DELTA["w"] / WIDEN)
    assert found.how == "measured; `jax`'s float64 loss keeps float32 steps (noise probe): float32's rounding"


@pytest.mark.parametrize(
    ("dtype", "oracle", "asked"),
    [("float64", True, ["probed jax"]), ("float64", False, ["side jax"]), ("float32", True, [])],
    ids=["oracle-clean", "side-clean", "float32-case"],
)
def test_otherwise_the_rounding_is_as_measured(monkeypatch, dtype, oracle, asked):
    own = _Own(probed=False, side=False)
    found = _rounding(monkeypatch, own, dtype=dtype, oracle=oracle)
    assert own.asked == asked and found == Rounding(DELTA, DELTA, "measured")


def test_a_failed_re_run_is_said_where_the_rounding_is(monkeypatch):
    found = _rounding(monkeypatch, _Own(probed=False, side=False), said="`jax`'s float32 re-run failed: boom")
    assert found == dataclasses.replace(
        Rounding(DELTA, DELTA, "measured"), how="`jax`'s float32 re-run failed: boom; measured", honest=False
    )
