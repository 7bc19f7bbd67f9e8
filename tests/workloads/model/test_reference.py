"""A backend as the model judge's reference (``reference.by_backend``): a gradient that cannot judge
anyone is refused in one line; one that can is handed on as the ``Reference``'s data
(``BackendAnswer``): the answer candidates are compared with, the backend and its rounding."""

from __future__ import annotations

import dataclasses
import types

import numpy as np
import pytest

from crosscheck._workloads.model.findings import Findings
from crosscheck._workloads.model.oracle.function import Differencing
from crosscheck._workloads.model.reference import BackendAnswer, by_backend
from crosscheck._workloads.model.rounding import Excess, Rounding
from crosscheck._workloads.protocol import Reference

SHAPES = {"w": (3, 2), "b": (2,)}


@dataclasses.dataclass(frozen=True)
class _Out:
    value: object
    error: str | None = None
    seconds: float = 0.0
    notes: dict = dataclasses.field(default_factory=dict)


def _judge(rounding: Rounding, dtype: str = "float32"):
    """What ``by_backend`` reads of the judge; ``rounded`` logs the roundings it asked for."""
    rounded: list[str] = []

    def measure(backend, value, name, call):
        rounded.append(name)
        return rounding

    findings = Findings(Differencing("full", "small", [], 0), "reference", SHAPES)
    return types.SimpleNamespace(shapes=SHAPES, dtype=dtype, findings=findings, rounding=measure), rounded


def _gradient(**changed) -> dict[str, np.ndarray]:
    out = {"w": np.ones((3, 2), np.float32), "b": np.ones(2, np.float32)}
    return {k: v for k, v in {**out, **changed}.items() if v is not None}


def test_a_sound_gradient_is_the_answer_with_its_backend_and_rounding():
    rounding = Rounding({k: np.zeros(s) for k, s in SHAPES.items()}, None, "measured", used=0.0123456)
    judge, rounded = _judge(rounding)
    backend = types.SimpleNamespace(name="torch")
    out = by_backend(judge, backend, _Out(_gradient()), call=None)
    assert out.error is None and isinstance(out.value, Reference)
    data = out.value.data
    assert isinstance(data, BackendAnswer) and data.backend is backend and data.rounding is rounding
    assert data.answer.error is rounding.term and set(data.answer.kinks) == set(SHAPES)
    assert judge.findings.reference_gradient is data.answer.value is out.value.value
    assert out.value.dtype == "float32" and out.value.notes == {
        "rounding": "measured",
        "rounding_of_permitted": 0.0123,
    }
    assert rounded == ["the reference"]


@pytest.mark.parametrize(
    "changed",
    [{"b": None}, {"b": np.ones(3, np.float32)}, {"b": np.array([1.0, np.nan], np.float32)}],
    ids=["missing", "shape", "not-finite"],
)
def test_a_gradient_that_cannot_judge_is_refused_in_one_line(changed):
    judge, rounded = _judge(Rounding({}, None, "measured"))
    out = by_backend(judge, object(), _Out(_gradient(**changed)), call=None)
    assert out.value is None and rounded == []  # no rounding measured for it (in float32)
    assert out.error == "reference gradient of `b` is missing, of the wrong shape or not finite"
    assert judge.findings.reference_gradient is None


def test_a_16_bit_reference_says_the_range_it_lost():
    rounding = Rounding({}, None, "measured", limits={"b": "1 entry overflowed bfloat16's range"})
    judge, rounded = _judge(rounding, dtype="bfloat16")
    out = by_backend(judge, object(), _Out(_gradient(b=np.array([1.0, np.inf], np.float32))), call=None)
    assert out.error.endswith("not finite (1 entry overflowed bfloat16's range)") and rounded == [
        "the reference"
    ]


def test_a_reference_beyond_float32s_rounding_is_refused():
    excess = Excess("w", 3.0, 1e-2)
    judge, _ = _judge(Rounding({}, None, "measured", excess=(excess,)))
    out = by_backend(judge, types.SimpleNamespace(name="torch"), _Out(_gradient()), call=None)
    assert out.value is None and out.error == excess.says("torch", "float32")


def test_a_failed_call_is_handed_on_as_it_is():
    judge, rounded = _judge(Rounding({}, None, "measured"))
    failed = _Out(None, error="raised ValueError")
    assert by_backend(judge, object(), failed, call=None) is failed and rounded == []
