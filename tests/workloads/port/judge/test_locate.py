"""Where a port candidate's difference starts (``locate``), from a ``Compared`` alone: the forward pass's
first module that differs, the backward pass's, or nowhere in words that say what was compared; then
what qualifies it (float32 steps, the device, a module computing in float32 in a float64 check)."""

from __future__ import annotations

import types

import numpy as np
import pytest

pytest.importorskip("torch")

from crosscheck._compare.record import Comparison
from crosscheck._report.report import FORWARD_ONLY
from crosscheck._workloads.model.findings import Findings
from crosscheck._workloads.model.oracle.function import Differencing
from crosscheck._workloads.port.judge.compare import Compared, Sides
from crosscheck._workloads.port.judge.localize import Runs
from crosscheck._workloads.port.judge.locate import locate
from crosscheck._workloads.port.sides.torch_side import ModuleCall

X = (np.ones(3),)


class Model:
    """The original's class: the verdict names the top module by it."""


def R(name: str, *, narrow: bool = False) -> ModuleCall:
    return ModuleCall(name, "Linear", X, X, narrow=narrow)


def _view(listed=()) -> types.SimpleNamespace:
    prepared = types.SimpleNamespace(jax_side=types.SimpleNamespace(listed=listed), parameters=["a.weight"])
    return types.SimpleNamespace(port=types.SimpleNamespace(torch=Model()), prepared=prepared)


def _compared(outputs, inputs=None, *, records=None, uncaptured="", caveats="", **changed) -> Compared:
    records = records or [R(n) for n in outputs]
    sides = Sides(Runs(records, records), Runs(records, records), caveats, uncaptured)
    rows = [Comparison("jax", "torch", True, "ok", 3, module=n) for n in outputs]
    fields = dict(
        sides=sides,
        comparisons=rows,
        paired={n: n for n in outputs},
        outputs=outputs,
        inputs=inputs or {},
        edges=[],
        listed=False,
        channels_last=False,
        coarse=[],
        float32_start=None,
        device=None,
    )
    return Compared(**{**fields, **changed})


def _located(compared, gradients=(), *, dtype="float32", forward=False, listed=()):
    findings = Findings(Differencing("full", "small", [], 0), "reference", {})
    view = _view(listed)
    return locate(compared, list(gradients), view, findings, name="jax", dtype=dtype, forward=forward)


def test_the_first_module_whose_output_differs_while_its_input_agrees():
    compared = _compared({"a": True, "b": False}, {"a": True, "b": True}, caveats="; a caveat")
    located = _located(compared)
    assert (located.origin.starts_in, located.origin.module) == ("forward", "b")
    assert located.origin.text.startswith("the forward pass differs first at `b` (Linear): its input agrees")
    assert located.comparisons is compared.comparisons and located.caveats == "; a caveat"


def test_every_output_agreeing_and_a_gradient_differing_is_the_backward_pass():
    bad = Comparison("jax", "numpy-fd", False, "mismatch", 4, parameter="a.weight")
    origin = _located(_compared({"a": True, "b": True}), [bad]).origin
    assert (origin.starts_in, origin.module) == ("gradient", "a")


@pytest.mark.parametrize(
    ("outputs", "uncaptured", "forward", "listed", "text"),
    [
        ({"a": True, "": True}, "", False, (), "every module's output and every gradient agree"),
        ({"": True}, "not captured", False, (), "the output and every gradient agree"),
        ({"": True}, "", True, (), f"the output agrees ({FORWARD_ONLY}) (only the output is compared"),
        ({"a": True}, "", False, ("a",), "every listed module's output (a), the model's output and every"),
    ],
    ids=["modules", "uncaptured", "only-the-output", "listed"],
)
def test_no_difference_says_what_was_compared(outputs, uncaptured, forward, listed, text):
    origin = _located(_compared(outputs, uncaptured=uncaptured), forward=forward, listed=listed).origin
    assert origin.starts_in == "nowhere" and origin.text.startswith(text)


def test_float32_steps_and_the_device_are_said():
    device = types.SimpleNamespace(unit=2.0**-8, hides=lambda: "the device's products hide less")
    compared = _compared({"a": True}, coarse=["torch"], float32_start="a", device=device)
    text = _located(compared).origin.text
    assert "(the float64 loss of `torch` computes in float32 somewhere" in text
    assert (
        "the first module whose float64 outputs differ by float32's rounding, not float64's, is `a`" in text
    )
    assert text.endswith("; the device's products hide less")


def test_a_port_module_computing_in_float32_in_a_float64_check_fails_there():
    records = [R("a"), R("b", narrow=True)]
    origin = _located(_compared({"a": True, "b": True}, records=records), dtype="float64").origin
    assert (origin.starts_in, origin.module) == ("forward", "b")
    assert origin.text.startswith("`b` (Linear) computes in float32 in a float64 check")
    assert (
        _located(_compared({"a": True, "b": True}, records=records)).origin.starts_in == "nowhere"
    )  # float32
