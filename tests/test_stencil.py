"""The model oracle's differencing (``fd.stencil``): Richardson's tableau over few steps, refined only
where the error bar is still large, the one-sided differences of the same evaluations for kinks."""

from __future__ import annotations

import numpy as np

from crosscheck._workloads.fd.stencil import LEVELS, MAX_LEVELS, REFINE_TO, differentiate


class Counted:
    """``f(x)`` per item, counting evaluations (``f`` takes the points and the items' indices)."""

    def __init__(self, f) -> None:
        self.f, self.count = f, 0

    def __call__(self, x: np.ndarray, index: np.ndarray) -> np.ndarray:
        self.count += x.size
        return self.f(x, np.broadcast_to(index, x.shape))


def test_a_smooth_function_costs_few_evaluations_and_its_error_bar_covers_the_truth():
    a = np.linspace(0.3, 3.0, 50)
    f = Counted(lambda x, i: np.exp(a[i] * x) + np.sin(3 * x))
    x0 = np.linspace(-1, 1, 50)
    value, error, kink = differentiate(f, x0, 2.0**-4, np.arange(50), 1.0)
    truth = a * np.exp(a * x0) + 3 * np.cos(3 * x0)
    assert np.all(np.abs(value - truth) <= error) and not kink.any()
    # refined while the error bar exceeds 1e-9 of |value| + the values' RMS (``REFINE_TO``)
    assert np.all(error <= REFINE_TO * (np.abs(truth) + np.sqrt(np.mean(truth**2))))
    assert 2 * LEVELS * 50 <= f.count <= 14 * 50  # 8 each, a few refined (36 each before issue 25)


def test_a_kink_at_the_point_is_seen_from_the_same_evaluations():
    # |x| at 0: every central difference is 0 with no error; the one-sided ones are +1 and -1.
    f = Counted(lambda x, i: np.abs(x))
    value, error, kink = differentiate(f, np.zeros(1), 0.25, np.arange(1), 0.0)
    assert kink[0] and value[0] == 0.0 and error[0] >= 1.0  # covers either slope
    assert f.count <= 2 * MAX_LEVELS  # refined to the end: no step makes it smooth


def test_a_kink_near_the_point_leaves_the_stencil_as_it_is_refined():
    # relu(x + 1e-2)**2 at 0 with a first step of 0.25: the coarse steps straddle the kink, the fine not.
    f = Counted(lambda x, i: np.maximum(x + 1e-2, 0.0) ** 2)
    value, error, kink = differentiate(f, np.zeros(1), 0.25, np.arange(1), 1e-4)
    assert not kink[0] and abs(value[0] - 2e-2) <= error[0] <= 1e-10
    assert f.count > 2 * LEVELS  # refined


def test_a_noisy_loss_is_differenced_as_before_and_covered():
    rng = np.random.default_rng(0)
    noise = 1e-7
    f = Counted(lambda x, i: np.sin(x) + noise * rng.standard_normal(x.shape))
    x0 = np.linspace(-1, 1, 20)
    value, error, _ = differentiate(f, x0, 0.25, np.arange(20), 1.0, noise=noise, float32=True)
    assert np.all(np.abs(value - np.cos(x0)) <= error)
