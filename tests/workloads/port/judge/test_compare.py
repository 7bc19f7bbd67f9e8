"""A port candidate's modules compared (``compare``), from records alone: both sides' records with the
caveats of how they were made (``Sides``), each paired output and first input judged (``Compared``),
and the implementations whose float64 loss keeps float32 steps."""

from __future__ import annotations

import types

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from crosscheck._workloads.model.findings import Findings  # noqa: E402
from crosscheck._workloads.model.oracle.function import Differencing, Function  # noqa: E402
from crosscheck._workloads.port.judge import compare  # noqa: E402
from crosscheck._workloads.port.judge.localize import Runs  # noqa: E402
from crosscheck._workloads.port.sides.torch_side import ModuleCall  # noqa: E402

X = np.array([1.0, 2.0, 3.0])


def R(name: str, outputs=(X,), inputs=(X,), note: str = "") -> ModuleCall:
    return ModuleCall(name, "Linear", inputs, outputs, note=note)


def test_the_sides_caveats_say_how_the_records_were_made():
    torch_runs = Runs([R("a")], (), problem="PyTorch forward in float64: raised")
    jax_runs = Runs(
        [R("a"), R("", note="its submodules were not captured")], [R("a")], home="made on the host"
    )
    wrote = "; the PyTorch module writes to its input `x` in place"
    sides = compare.sides(torch_runs, jax_runs, torch.nn.Linear(2, 2), wrote)
    assert sides.torch is torch_runs and sides.jax is jax_runs
    assert sides.uncaptured == "its submodules were not captured"
    assert sides.caveats.startswith("; made on the host; the PyTorch side could not be re-run")
    assert sides.caveats.endswith(f"{wrote}; its submodules were not captured")


def test_clean_records_carry_no_caveat():
    runs = Runs([R("a")], [R("a")])
    assert compare.sides(runs, runs, torch.nn.Linear(2, 2), "") == compare.Sides(runs, runs, "", "")


def _prepared(listed=("a", "b")) -> types.SimpleNamespace:
    """A port whose JAX side lists its intermediates (paired by name, no mapping needed)."""
    return types.SimpleNamespace(
        jax_side=types.SimpleNamespace(listed=listed, leaves=[]),
        port=types.SimpleNamespace(output=None, loss=None),
    )


def _compared(torch_records, jax_records, *, dtype="float64", coarse=()):
    sides = compare.Sides(Runs(torch_records, torch_records), Runs(jax_records, jax_records))
    return compare.compare(
        sides,
        [],
        _prepared(),
        name="jax",
        dtype=dtype,
        coarse=list(coarse),
        device=None,
        keep=False,
        forward=True,
    )


def test_each_paired_output_and_its_input_are_judged():
    found = _compared([R("a"), R("b", outputs=(X,)), R("c")], [R("a"), R("b", outputs=(X + 1,))])
    assert found.listed and found.paired == {"a": "a", "b": "b"}  # `c`: not on the JAX side
    assert [c.module for c in found.comparisons] == ["a", "b"]
    assert [c.passed for c in found.comparisons] == [True, False]
    assert found.outputs == {"a": True, "b": False} and found.inputs == {"a": True, "b": True}
    assert found.edges == [] and found.float32_start is None and not found.channels_last


def test_with_float32_steps_the_first_module_differing_by_float32s_rounding_is_found():
    near = X * (1 + 1e-10)  # within float32's rounding, far beyond float64's
    found = _compared([R("a"), R("b")], [R("a"), R("b", outputs=(near,))], coarse=["torch"])
    assert found.coarse == ["torch"] and found.outputs == {"a": True, "b": True}
    assert found.float32_start == "b"
    exact = _compared([R("a"), R("b")], [R("a"), R("b", outputs=(near,))])
    assert exact.outputs["b"] is False and exact.float32_start is None


def _function(owner: str, float32: bool) -> Function:
    return Function(owner, owner, lambda p: 0.0, 0.0, precision=types.SimpleNamespace(float32=float32))  # type: ignore[arg-type]


def test_the_losses_with_float32_steps_are_the_oracles_and_the_sides():
    findings = Findings(Differencing("full", "small", [], 0), "reference", {})
    findings.anchor = types.SimpleNamespace(function=_function("torch", True))  # type: ignore[assignment]
    steps = {"jax": True, "other": False}
    assert compare.float32_losses(findings, steps, "float64") == ["jax", "torch"]
    assert compare.float32_losses(findings, steps, "float32") == []
    findings.anchor = types.SimpleNamespace(function=_function("torch", False))  # type: ignore[assignment]
    assert compare.float32_losses(findings, {}, "float64") == []
