"""Workloads: the definition, deterministic inputs, the oracle, the driver and the examples."""

from __future__ import annotations

import numpy as np
import pytest

import crosscheck
from crosscheck._workload import load_workload


def _linear(**overrides):
    fields = {
        "name": "linear",
        "parameters": {"w": (3, 2), "b": (2,)},
        "inputs": {"x": (5, 3)},
        "reference": lambda p, i: float(np.sum((i["x"] @ p["w"] + p["b"]) ** 2)),
    }
    return crosscheck.Workload(**{**fields, **overrides})


def test_make_is_deterministic_and_rounded_once_to_the_dtype():
    workload = _linear()
    params, inputs = workload.make(seed=3, dtype="float32")
    again, _ = workload.make(seed=3, dtype="float32")
    wide, _ = workload.make(seed=3, dtype="float64")
    assert {k: v.shape for k, v in params.items()} == {"w": (3, 2), "b": (2,)}
    assert inputs["x"].dtype == np.float32
    assert all(np.array_equal(params[k], again[k]) for k in params)
    assert np.array_equal(params["w"], wide["w"].astype(np.float32))


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"parameters": {}}, "at least one array"),
        ({"parameters": {"w": (3, 0)}}, "tuple of positive integers"),
        ({"inputs": {"w": (1,)}}, "both a parameter and an input"),
        ({"reference": 3.0}, "`reference` must be callable"),
        ({"implementations": {"jax": 1}}, "must be a callable"),
    ],
    ids=["no-parameters", "zero-dim", "overlap", "reference", "implementation"],
)
def test_bad_definitions_say_what_is_wrong(overrides, message):
    with pytest.raises((TypeError, ValueError), match=message):
        _linear(**overrides)


@pytest.mark.parametrize(
    ("generate", "message"),
    [
        (
            lambda rng, dtype: ({"w": np.zeros((2, 3)), "b": np.zeros(2)}, {"x": np.zeros((5, 3))}),
            r"\(3, 2\)",
        ),
        (lambda rng, dtype: ({"w": np.zeros((3, 2))}, {"x": np.zeros((5, 3))}), r"\['b', 'w'\]"),
        (lambda rng, dtype: None, "must return \\(params, inputs\\)"),
        (
            lambda rng, dtype: ({"w": np.full((3, 2), np.nan), "b": np.zeros(2)}, {"x": np.zeros((5, 3))}),
            "finite",
        ),
    ],
    ids=["shape", "names", "not-a-pair", "nan"],
)
def test_generate_is_checked(generate, message):
    with pytest.raises(ValueError, match=message):
        _linear(generate=generate).make(seed=0, dtype="float64")


def test_registry_lists_the_stack():
    assert "stack" in crosscheck.available_workloads()
    assert load_workload("stack") is None


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("nope", "unknown workload `nope`"),
        ("no_such_module_xyz:workload", "cannot import module"),
        ("crosscheck:nothing_here", "has no attribute"),
        ("crosscheck:__version__", "must be a crosscheck.Workload"),
    ],
    ids=["name", "module", "attribute", "not-a-workload"],
)
def test_bad_workload_specs(spec, message):
    with pytest.raises(ValueError, match=message):
        load_workload(spec)
