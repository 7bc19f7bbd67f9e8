"""What a device's reduced-precision products may explain (``crosscheck._compare.modelled``): a run's
median difference from float32 against the device model's, per parameter, in the device's units of an
entry's scale."""

from __future__ import annotations

import numpy as np
import pytest

from crosscheck._compare import modelled

U = 2.0**-8


def _arrays(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"w": rng.standard_normal((40, 30)), "b": rng.standard_normal(30)}


def test_a_difference_is_measured_in_units_of_an_entry_s_scale():
    exact = {"w": np.ones((4, 4))}  # scale: |1| + RMS 1 + the shared RMS 1 = 3
    off = {"w": np.full((4, 4), 1 + 3 * 2 * U)}
    found = modelled.summary(off, exact, exact, U)
    assert found["w"] == pytest.approx([2.0, 0.0])


def test_a_run_within_the_model_is_not_beyond_and_one_far_outside_it_is():
    exact = _arrays()
    rng = np.random.default_rng(1)
    model = {k: v * (1 + U * rng.standard_normal(v.shape)) for k, v in exact.items()}
    near = {k: v * (1 + U * rng.standard_normal(v.shape)) for k, v in exact.items()}
    found = modelled.summary(near, model, exact, U)
    assert modelled.beyond(found) == []
    assert all(0 < modelled.used(*found[k]) < 1 for k in found)
    twice = modelled.summary({k: 2 * v for k, v in model.items()}, model, exact, U)
    assert {name for name, *_ in modelled.beyond(twice)} == {"w", "b"}


def test_the_floor_spares_a_parameter_whose_model_is_nearly_exact():
    exact = {"b": np.ones(4)}
    found = {"b": [modelled.MODEL_FLOOR_UNITS - 0.1, 0.0]}
    assert modelled.beyond(found) == []
    assert modelled.beyond({"b": [modelled.MODEL_FLOOR_UNITS + 0.1, 0.0]}) == [
        ("b", modelled.MODEL_FLOOR_UNITS + 0.1, 0.0)
    ]
    assert modelled.summary({}, exact, exact, U) == {}  # a parameter the run did not return: not summarised
