"""Differences in one layer's outputs (``oracle/outputs.py``): the stencil a kink on one side leaves,
the rows that take central differences alone, and the steps' room after a crossing."""

from __future__ import annotations

import numpy as np
from exact import as_float, exact_gradient

import crosscheck
from crosscheck._workloads.stack.forward import backward, forward
from crosscheck._workloads.stack.oracle import outputs
from crosscheck._workloads.stack.oracle import preactivation as pa


def _one_side_case(gap: float):
    """y[1] = [1, 1]; z[1] = [gap, 2]: moving output (0, 0, 0) down by ``gap`` turns unit (1, 0, 0)
    off; moving it up crosses nothing."""
    weights = np.array([np.eye(2), [[1.0, 1.0], [gap - 1.0, 1.0]], np.eye(2)])
    return weights, np.ones((1, 2))


def test_a_kink_near_on_one_side_leaves_a_one_sided_step_of_the_far_sides_size():
    weights, x = _one_side_case(2.0**-20)
    fwd = forward(weights, x)
    rows, cols = np.array([0, 0]), np.array([0, 1])
    out = outputs.differentiate(fwd, 0, rows, cols, outputs.row_sigmas(fwd)[1], 1.0)
    # Output 0: one-sided, upwards, at the step cap (a central step would be below 2**-23). Output 1
    # moves z[1] by W[1][1] = [2**-20 - 1, 1]: unit 0 reaches its kink at t = 2**-20 / (1 - 2**-20)
    # upwards, so it too goes one-sided, downwards.
    assert out["step"][0] == 1.0 and out["step"][1] < 0
    deltas, _ = backward(fwd)
    np.testing.assert_allclose(out["value"], deltas[0][0], rtol=1e-12)
    assert np.all(np.abs(out["value"] - deltas[0][0]) <= out["error"])
    assert not out["kink"].any()


def test_the_whole_gradient_of_a_one_sided_case_is_exact_within_its_bars():
    for gap in (2.0**-10, 2.0**-20, 2.0**-30):
        weights, x = _one_side_case(gap)
        est = pa.estimate(weights, x)
        exact = as_float(exact_gradient(weights, x))
        assert np.all(np.abs(est.value - exact) <= est.error), gap
        assert not est.kink.any()


def test_a_kink_nearer_than_the_smallest_step_is_flagged_whichever_stencil():
    weights, x = _one_side_case(2.0**-50)
    est = pa.estimate(weights, x)
    assert est.kink[0, :, 0].all() and tuple(est.delta_kink_at[0, 0, 0]) == (1, 0, 0)


def test_rows_with_a_later_pre_activation_near_zero_take_central_differences_alone():
    weights, x = crosscheck.make_inputs(crosscheck.Case(layers=6, dim=16, batch=4, init="integer"))
    fwd = forward(weights, x)
    for k in range(4):
        later = np.stack([np.any(z == 0, axis=1) for z in fwd.zs[k + 2 :]]).any(axis=0)
        np.testing.assert_array_equal(outputs.near_zero_later(fwd, k), later)
    assert outputs.near_zero_later(fwd, 0).any()
    weights, x = crosscheck.make_inputs(crosscheck.Case(layers=6, dim=16, batch=4))
    assert not outputs.near_zero_later(forward(weights, x), 0).any()


def test_a_crossing_narrows_the_room_on_its_side_within_the_kink():
    room = np.array([[1.0, 1.0], [1.0, 1.0]])
    points = np.array([[0.5, -0.5], [0.25, 0.5]])  # a central stencil, a one-sided one upwards
    crossed = np.array([[False, True], [False, True]])
    reach = np.array([[np.inf, 0.1], [np.inf, 0.3]])
    outputs._narrow(room, np.array([0, 1]), points, crossed, reach)
    np.testing.assert_array_equal(room, [[1.0, 0.05], [0.125, 1.0]])


def test_the_plan_turns_one_sided_only_where_it_gains_and_may():
    room = np.array([[1.0, 2.0**-10], [1.0, 0.5], [1.0, 2.0**-10]])
    step, side = outputs._plan(room, 1.0, np.array([True, True, False]))
    np.testing.assert_array_equal(side, [1.0, 0.0, 0.0])
    np.testing.assert_array_equal(step, [0.5, 0.5, 2.0**-10])
