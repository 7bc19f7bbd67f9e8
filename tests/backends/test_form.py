"""The JAX adapter forms the points along a line on several threads (``backends/jax/form.py``, issue
38): each entry the bits one thread gives, ``point + c * signs`` rounded once, whichever thread formed it
and wherever a thread's share begins (inside a tensor, at a block's edge)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("jax")

from crosscheck.backends.jax import form


def _pieces(sizes, c=3e-4):
    rng = np.random.default_rng(0)
    pieces = []
    for n in sizes:
        point = rng.standard_normal(n)
        point[: min(n, 2)] = [-0.0, np.nan][: min(n, 2)]  # a signed zero and a NaN keep their bits
        signs = rng.choice(np.array([-1, 0, 1], np.int8), n)
        pieces.append((point, signs, np.full(n, 7.0), np.float64(c)))
    return pieces


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_every_entry_is_formed_as_one_thread_forms_it(monkeypatch, threads):
    monkeypatch.setattr(form, "THREADED", 64)
    monkeypatch.setattr(form, "BLOCK", 8)  # thread shares and blocks end inside the tensors
    monkeypatch.setattr(form, "workers", lambda: threads)
    shares = []
    fill = form._fill
    monkeypatch.setattr(form, "_fill", lambda flat, lo, hi: shares.append((lo, hi)) or fill(flat, lo, hi))
    pieces = _pieces([37, 1, 0, 90, 13])
    form.form(pieces)
    for point, signs, buffer, c in pieces:
        expected = point + signs * c  # NumPy on one thread: the product exact, the sum rounded once
        assert np.array_equal(buffer.view(np.uint64), expected.view(np.uint64))
    assert sorted(shares) == [(141 * i // threads, 141 * (i + 1) // threads) for i in range(threads)]


def test_a_small_point_is_formed_on_one_thread(monkeypatch):
    shares = []
    fill = form._fill
    monkeypatch.setattr(form, "_fill", lambda flat, lo, hi: shares.append((lo, hi)) or fill(flat, lo, hi))
    monkeypatch.setattr(form, "workers", lambda: 4)
    form.form(_pieces([100, 50]))
    assert shares == [(0, 150)]


def test_omp_num_threads_caps_the_threads(monkeypatch):
    # A sweep's worker processes ask for one thread each (``OMP_NUM_THREADS``): the form keeps to it
    monkeypatch.setattr(form, "THREADED", 64)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    shares = []
    fill = form._fill
    monkeypatch.setattr(form, "_fill", lambda flat, lo, hi: shares.append((lo, hi)) or fill(flat, lo, hi))
    form.form(_pieces([1000]))
    assert shares == [(0, 1000)]


@pytest.mark.parametrize("contiguous", [True, False])
def test_the_pytorch_buffer_is_formed_a_block_at_a_time_to_the_same_bits(monkeypatch, contiguous):
    """The PyTorch adapter's ``buffer.form`` (issue 38): blocks that end inside a tensor, or the whole
    tensor where one operand is not contiguous, give the bits of one ``copy_`` then ``torch.add``."""
    torch = pytest.importorskip("torch")
    from crosscheck.backends.torch import buffer

    monkeypatch.setattr(buffer, "BLOCK", 8)
    point, signs, _, c = _pieces([4 * 37])[0]
    base = torch.from_numpy(point.reshape(4, 37))
    moves = torch.from_numpy(signs.reshape(4, 37))
    if not contiguous:
        base, moves = base.t().contiguous().t(), moves.t().contiguous().t()
    into = torch.full((4, 37), 7.0, dtype=torch.float64)
    buffer.form(into, base, moves, float(c))
    whole = torch.empty_like(into)
    whole.copy_(moves)
    torch.add(base, whole, alpha=float(c), out=whole)
    assert torch.equal(into.view(torch.int64), whole.view(torch.int64))
    expected = point + signs * c  # the product exact, the sum rounded once
    assert np.array_equal(into.numpy().reshape(-1).view(np.uint64), expected.view(np.uint64))
