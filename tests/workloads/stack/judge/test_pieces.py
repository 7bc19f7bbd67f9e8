"""A candidate whose activations and gradient took different ReLU pieces is told so (``judge/pieces.py``):
its gradient on float64's pattern while its activations show float32's, or its backward pass with some
units' ReLU taken otherwise; the units are named, and only where that piece agrees at every entry."""

from __future__ import annotations

import numpy as np
import planted
import pytest

import crosscheck
from crosscheck._workloads.stack import pattern as _pattern
from crosscheck._workloads.stack.forward import backward, forward
from crosscheck._workloads.stack.judge.pieces import implied

SAID = "its activations and its gradient took different ReLU pieces: "


def float64_piece(weights, x):
    """The gradient of float64's ReLU pattern, rounded to the inputs' dtype: what a gradient computed in
    float64 (or on float64's masks) gives, while its float32 activations show another pattern."""
    fwd = forward(weights, x)
    _, grads = backward(fwd)
    return np.asarray(grads).astype(x.dtype)


def backward_taken_otherwise(units):
    """``planted``'s float32 gradient with the backward pass's ReLU of ``units`` taken otherwise."""

    def grad(weights, x):
        ys, masks, y = [x], [], x
        for w in weights:
            z = y @ w
            masks.append(z > 0)
            y = np.where(masks[-1], z, 0).astype(x.dtype)
            ys.append(y)
        for k, n, j in units:
            masks[k][n, j] = not masks[k][n, j]
        g, out = 2 * y, np.empty_like(weights)
        for k in reversed(range(len(weights))):
            delta = np.where(masks[k], g, 0).astype(x.dtype)
            out[k] = ys[k].T @ delta
            g = delta @ weights[k].T
        return out

    return grad


def _run(grad, **case):
    backend = planted.Patterned(grad)
    report = crosscheck.run(**{"batch": 8, "seed": 0, **case}, backends=[backend])
    (comparison,) = report.comparisons
    return report, comparison


def test_a_gradient_on_float64s_pattern_beside_float32_activations_is_named():
    # float32 rounding flips 6 ReLUs of this case: the activations show them, the gradient does not.
    report, comparison = _run(float64_piece, dim=64, init="nearzero")
    assert not report.passed and comparison.mismatched > 1000
    line = comparison.message.splitlines()[-2]  # the last: which pattern it was judged on
    assert line.startswith(f"{SAID}its gradient is float64's piece (on float64's ReLU pattern every entry")
    assert "not the piece its activations show (which differs from float64's at 6 units (0, 0, 18)," in line


def test_units_the_backward_pass_takes_otherwise_are_named():
    units = [(1, 4, 10), (3, 2, 5), (5, 0, 7)]  # on in the forward pass, each far from zero
    report, comparison = _run(backward_taken_otherwise(units), dim=32)
    assert not report.passed
    assert comparison.message.endswith(
        f"{SAID}its gradient is that of the pattern its activations show with 3 units taken otherwise "
        "(on that pattern every entry agrees): on in its activations, off in its gradient at 3 units "
        "(1, 4, 10), (3, 2, 5), (5, 0, 7)"
    )


def test_another_derivative_at_exact_zeros_is_named_as_units_on_in_the_gradient():
    report, comparison = _run(planted.relu_derivative_one_at_zero, dim=32, seed=1, init="integer")
    assert not report.passed
    (line,) = [line for line in comparison.message.splitlines() if line.startswith(SAID)]
    assert "off in its activations, on in its gradient at 24 units (0, 0, 8)," in line
    assert line.endswith(", each an exact zero")


BUGS = [planted.no_last_relu, planted.off_at_largest(1e-2), planted.transposed, planted.mean_not_sum]


@pytest.mark.parametrize("bug", BUGS, ids=[bug.__name__ for bug in BUGS])
def test_a_bug_of_another_kind_is_not_called_a_pattern(bug):
    report, comparison = _run(bug, dim=32)
    assert not report.passed
    assert SAID not in comparison.message


def test_the_backward_masks_a_gradient_implies_are_read_exactly():
    weights, x = crosscheck.make_inputs(crosscheck.Case(layers=4, batch=6, dim=10, seed=2, dtype="float64"))
    fwd = forward(weights, x)
    pattern = _pattern.held(fwd, backward(fwd, grads=False)[0], fwd.masks)
    units = [(0, 1, 3), (2, 5, 0)]
    found = implied(pattern, backward_taken_otherwise(units)(weights, x))
    assert found is not None
    differ = [np.nonzero(mask != shown) for mask, shown in zip(found, fwd.masks, strict=True)]
    toggled = [
        (k, int(n), int(j)) for k, (rows, cols) in enumerate(differ) for n, j in zip(rows, cols, strict=True)
    ]
    assert toggled == units


def test_a_batch_wider_than_a_layer_implies_nothing():
    weights, x = crosscheck.make_inputs(crosscheck.Case(layers=3, batch=12, dim=4, seed=2, dtype="float64"))
    fwd = forward(weights, x)
    pattern = _pattern.held(fwd, backward(fwd, grads=False)[0], fwd.masks)
    assert implied(pattern, float64_piece(weights, x)) is None
