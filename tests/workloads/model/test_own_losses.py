"""Each candidate's own float64 loss, as the model judge uses it (``own_losses``): made once a run, not at
all with a surrogate, and the anchor of "same function" chosen among them: a clean loss first."""

from __future__ import annotations

import types

import numpy as np
import pytest

from crosscheck._workloads.model import own_losses
from crosscheck._workloads.model.oracle.function import Differencing, Function, Skip
from crosscheck._workloads.model.own_losses import OwnLosses, anchor
from crosscheck._workloads.protocol import Point


def _function(owner: str, *, float32: bool | None) -> Function:
    """A loss of ``owner``; ``float32``: what its noise probe found (None: not probed)."""
    precision = None if float32 is None else types.SimpleNamespace(float32=float32)
    return Function(f"`{owner}`'s own float64 loss", owner, lambda p: 0.0, 1.0, precision=precision)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("functions", "chosen"),
    [
        ({"a": _function("a", float32=True), "b": _function("b", float32=False)}, "b"),
        ({"a": _function("a", float32=False), "b": _function("b", float32=False)}, "a"),
        ({"a": _function("a", float32=None), "b": _function("b", float32=True)}, "a"),
        ({"a": _function("a", float32=True), "b": _function("b", float32=True)}, "a"),
        ({"a": Skip("no loss"), "b": _function("b", float32=True)}, "b"),
        ({"a": Skip("no loss"), "b": Skip("no loss")}, None),
    ],
    ids=["clean-second", "both-clean", "not-probed-is-clean", "neither-clean", "one-usable", "none-usable"],
)
def test_the_anchor_is_the_first_clean_loss_else_the_first_usable(functions, chosen):
    candidates = [("a", object()), ("b", object())]
    found = anchor(candidates, functions)
    assert (found[0] if found is not None else None) == chosen
    if found is not None:
        assert found == candidates[0 if chosen == "a" else 1]  # the name with its backend


def _losses(monkeypatch, *, surrogate: bool = False, differences=None) -> tuple[OwnLosses, list[str]]:
    """An ``OwnLosses`` whose losses and differences are logged (``made``), never computed."""
    made: list[str] = []

    def own_loss(backend, name, point, call, clock=None, **kwargs):
        made.append(f"loss {name}" + (" kept" if kwargs.get("keep") else ""))
        return _function(name, float32=name == "steps")

    def difference(function, point, chosen, call, progress):
        made.append(f"differences {function.owner}")
        return differences if differences is not None else types.SimpleNamespace(function=function)

    monkeypatch.setattr(own_losses, "own_loss", own_loss)
    monkeypatch.setattr(own_losses, "difference", difference)
    point = Point({"w": np.zeros(2)}, {}, {}, "float64")
    chosen = Differencing("full", "small", [], 0)
    return OwnLosses(point, chosen, lambda *a: None, surrogate=surrogate), made


def test_each_loss_and_its_differences_are_made_once(monkeypatch):
    own, made = _losses(monkeypatch)
    first = own.differenced(object(), "a", call=None)
    assert own.differenced(object(), "a", call=None) is first
    assert made == ["loss a kept", "differences a"]


def test_a_failed_difference_is_a_failure_said_and_kept(monkeypatch):
    own, made = _losses(monkeypatch, differences="the budget ran out")
    found = own.differenced(object(), "a", call=None)
    assert found == Skip("finite differences of `a`'s own loss failed: the budget ran out", failure=True)
    assert own.differenced(object(), "a", call=None) is found and made == ["loss a kept", "differences a"]


def test_with_a_surrogate_no_loss_is_made(monkeypatch):
    own, made = _losses(monkeypatch, surrogate=True)
    found = own.differenced(object(), "a", call=None)
    assert isinstance(found, Skip) and found.reason == own_losses.SURROGATE and not found.failure
    assert made == []


def test_the_anchor_is_chosen_after_every_loss_is_differenced(monkeypatch):
    own, made = _losses(monkeypatch)
    candidates = [("steps", object()), ("clean", object())]
    assert own.difference_each(candidates, call=None) == candidates[1]  # the clean one, named second
    assert made == ["loss steps kept", "differences steps", "loss clean kept", "differences clean"]


def test_float32_steps_are_the_oracles_probe_else_the_sides_once(monkeypatch):
    own, made = _losses(monkeypatch)
    backend = types.SimpleNamespace(name="steps")
    own.function(backend, "steps", call=None)
    assert own.steps(backend, "steps", None, oracle=True) and made == [
        "loss steps kept"
    ]  # the oracle's probe
    assert own.probed_float32("steps") and not own.probed_float32("other")
    assert own.steps(backend, "other", None, oracle=True)  # not the oracle's: the side's (its name) probe
    assert own.steps(backend, "steps", None, oracle=False)
    assert made == ["loss steps kept", "loss steps"]  # the side probed once
    assert own.float32_steps == {"steps": True}
