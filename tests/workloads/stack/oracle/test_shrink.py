"""The step loop the stack's oracles share (``oracle/shrink.py``): a perturbation that crosses a kink is
tried again lower, once at the smallest step, then held and flagged; one that crosses nothing keeps its
difference and the step it reports."""

from __future__ import annotations

import numpy as np

from crosscheck._workloads.stack.oracle import shrink


def _kinks_at(distance: np.ndarray, calls: list):
    """An ``attempt`` whose perturbation ``s`` crosses a kink when its step reaches ``distance[s]``."""

    def attempt(todo, h):
        calls.append(todo.copy())
        crossed = h >= distance[todo]
        at = np.column_stack([todo, todo, todo])

        def again(hit):
            return h[hit] / 4

        return shrink.Attempt(h * 10, h, crossed, at, -h, again)

    return attempt


def _held(stuck, h):
    return np.full(stuck.size, 7.0), np.full(stuck.size, 0.5)


def test_a_crossing_step_shrinks_until_clear_and_one_on_a_kink_is_held_and_flagged():
    distance = np.array([np.inf, 0.3, 0.0])  # clear; clear below 0.3; on a kink
    calls: list = []
    out = shrink.differences(np.ones(3), 2.0**-6, 1.0, _kinks_at(distance, calls), _held)
    # 1, 1/4 (clear for 1), then 1/16, 1/64 (the smallest), then given up on for 2.
    assert [c.tolist() for c in calls] == [[0, 1, 2], [1, 2], [2], [2]]
    np.testing.assert_array_equal(out["value"], [10.0, 2.5, 7.0])
    np.testing.assert_array_equal(out["step"], [-1.0, -0.25, 1.0])  # the attempt's step; the cap if held
    np.testing.assert_array_equal(out["kink"], [False, False, True])
    np.testing.assert_array_equal(out["kink_at"], [[-1] * 3, [-1] * 3, [2] * 3])
    assert out["evaluations"] == 2 * (3 + 2 + 1 + 1) + 2


def test_a_step_below_the_smallest_is_never_tried():
    calls: list = []
    out = shrink.differences(np.array([2.0**-9]), 2.0**-6, 1.0, _kinks_at(np.array([np.inf]), calls), _held)
    assert calls == [] and out["kink"].all() and out["evaluations"] == 2
