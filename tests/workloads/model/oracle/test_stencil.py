"""The model oracle's differencing (``oracle.stencil``): Richardson's tableau over few steps, refined only
where the error bar is still large, the one-sided differences of the same evaluations for kinks."""

from __future__ import annotations

import numpy as np
import pytest

from crosscheck._workloads.model.oracle import stencil
from crosscheck._workloads.model.oracle.stencil import LEVELS, MAX_LEVELS, REFINE_TO, differentiate


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


def test_refinement_stops_where_the_rounding_outgrows_the_bar_and_no_estimate_changes(monkeypatch):
    # A cubic on a large constant: the tableau removes the truncation exactly, so every bar is the
    # stencil's rounding (``STENCIL_ROUNDING`` roundings of 1e8 over the last step), far above
    # ``REFINE_TO``; a smaller step only doubles it. Before issue 38 every item was halved to
    # ``MAX_LEVELS`` anyway (20 evaluations), every later window's bar larger than the kept one.
    a = np.linspace(-2.0, 2.0, 7)

    def cubic(x, i):
        return 1e8 + a[i] * x + x**3

    run = (np.zeros(7), 2.0**-4, np.arange(7), 1e8)
    spared = Counted(cubic)
    now = differentiate(spared, *run)
    assert spared.count == 2 * LEVELS * 7  # the first four steps only

    def always(error, last, rounding, float32=False):  # the stop undone: refined while over the target
        return np.ones(np.shape(error), bool)

    monkeypatch.setattr(stencil, "_worth_halving", always)
    wasted = Counted(cubic)
    before = differentiate(wasted, *run)
    assert wasted.count == 2 * MAX_LEVELS * 7
    for kept, old in zip(now, before, strict=True):
        np.testing.assert_array_equal(kept, old)  # the same estimates, bars and kinks, to the bit
    assert np.all(np.abs(now[0] - a) <= now[1])


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


def test_a_noisy_loss_is_covered_with_few_evaluations():
    rng = np.random.default_rng(0)
    noise = 1e-7
    a = np.linspace(-1, 1, 20)  # items share the point and its loss, as entries of one model do
    f = Counted(lambda x, i: np.sin(a[i] * x) + np.cos(x) + noise * rng.standard_normal(x.shape))
    value, error, _ = differentiate(f, np.zeros(20), 0.25, np.arange(20), 1.0, noise=noise, float32=True)
    assert np.all(np.abs(value - a) <= error)
    assert np.all(error <= 1e-3) and f.count <= 12 * 20  # judgeable; SciPy spent 36 an item


def _relu_softmax32(seed=3):
    """A ReLU layer, then a softmax computed in float32 (Hugging Face's upcast) in a float64 loss; the
    exact gradient is autograd's of the same function in float64 throughout (``cast=False``), and
    ``bug`` scales the logits (a planted bug of 1 %)."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(seed)
    params = {"w1": rng.standard_normal((16, 4)) / 2, "w2": rng.standard_normal((4, 16)) / 4}
    x, r = torch.tensor(rng.standard_normal((8, 4))), torch.tensor(rng.standard_normal((8, 4)))

    def f(p, cast=True, bug=1.0):
        z = torch.relu(x @ p["w1"].T) @ p["w2"].T * bug
        z = z.float() if cast else z
        return torch.sum(r * torch.softmax(z, -1).to(torch.float64))

    def loss(p):
        with torch.no_grad():
            return float(f({k: torch.tensor(v) for k, v in p.items()}))

    def exact(bug=1.0):
        t = {k: torch.tensor(v, requires_grad=True) for k, v in params.items()}
        grads = torch.autograd.grad(f(t, cast=False, bug=bug), list(t.values()))
        return {k: g.numpy() for k, g in zip(params, grads, strict=True)}

    return loss, params, exact(), exact(bug=1.01)


def _scipy(evaluate, x0, h0, index, loss0, noise=0.0, float32=False, magnitude=None):
    """The noisy path before: SciPy's ``derivative`` from a quarter of the RMS, halved at most once."""
    from scipy.differentiate import derivative

    found = {}
    with np.errstate(all="ignore"):
        for side in (0, 1, -1):
            res = derivative(evaluate, x0, args=(index,), initial_step=h0, step_direction=side, maxiter=2)
            last = h0 * 2.0 ** -np.maximum(res.nit, 1)
            found[side] = (res.df, 4.0 * np.nan_to_num(res.error, nan=np.inf) + 128.0 * noise / last)
    (value, error), (fwd, e_fwd), (bwd, e_bwd) = found[0], found[1], found[-1]
    kink = ~(np.abs(fwd - bwd) <= e_fwd + e_bwd)
    return value, error + np.where(kink, np.nan_to_num(np.abs(fwd - bwd), nan=np.inf), 0.0), kink


def _judged(found, gradient):
    """Per parameter: entries judged whose error bar does not cover ``gradient``, and entries unjudged."""
    return {
        k: (
            int(np.sum((np.abs(found.value[k] - gradient[k]) > found.error[k]) & ~found.unjudgeable[k])),
            int(found.unjudgeable[k].sum()),
        )
        for k in gradient
    }


def test_a_float32_step_over_relu_kinks_is_refined_to_honest_error_bars(monkeypatch):
    # A ReLU's kinks inside every step of SciPy's noisy path: its error estimate missed them, and an
    # entry's bar missed the exact gradient by 6 times. The tableau, refined while halving can still
    # narrow the bar, covers every judged entry, judges more of them, and still catches a 1 % bug.
    from crosscheck._workloads.model.oracle import entries, precision

    loss, params, exact, buggy = _relu_softmax32()
    noise = precision.probe(loss, params, lambda thunk: thunk())
    assert precision.judge(noise, loss(params), None, "torch").float32
    found = entries.estimate(loss, params, noise=noise, float32=True)
    mine = _judged(found, exact)
    assert all(uncovered == 0 for uncovered, _ in mine.values()), mine
    assert found.evaluations <= 10 * 128  # 8 an entry, a few refined
    assert sum(_judged(found, buggy)[k][0] for k in params) >= 64  # the planted bug: most entries
    monkeypatch.setattr(entries, "differentiate", _scipy)
    before = _judged(entries.estimate(loss, params, noise=noise, float32=True), exact)
    assert sum(uncovered for uncovered, _ in before.values()) >= 1, before  # SciPy's bar did not cover
    assert sum(u for _, u in before.values()) > sum(u for _, u in mine.values())
