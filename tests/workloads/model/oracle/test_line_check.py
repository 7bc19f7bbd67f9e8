"""The write check of a port's PyTorch forward along a line (``backends/torch/buffer.py``, issue 38).

Along a line the tensors a port's forward is handed are the PyTorch adapter's buffer: the adapter hands
``torch_side.call`` a test of what the buffer holds (recomputed after the forward) instead of the copy
the forward made of each tensor. A forward that writes into a parameter still fails, moved or not, and
only the inputs are copied; signs other than -1, 0 and 1 get no test (the forward copies as before).
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from crosscheck._backends import handed  # noqa: E402
from crosscheck._workloads.model.workload import _framework_backend  # noqa: E402
from crosscheck._workloads.port.sides import torch_side  # noqa: E402


class Linear(torch.nn.Module):
    def __init__(self, writes: str = "") -> None:
        super().__init__()
        self.writes = writes
        self.weight = torch.nn.Parameter(torch.zeros(6, 4, dtype=torch.float64))
        self.bias = torch.nn.Parameter(torch.zeros(4, dtype=torch.float64))

    def forward(self, inputs):
        out = torch.sum(torch.tanh(inputs["x"] @ self.weight + self.bias) ** 2)
        if self.writes:
            with torch.no_grad():
                getattr(self, self.writes).view(-1)[-1] += 1.0  # the last entry, in place
        return out


def _adapter(writes: str = ""):
    wrapped = torch_side.Wrapped(Linear(writes), lambda m, inputs: m(inputs))

    def loss(p, i):
        return torch_side.call(wrapped, p, i)

    return type(_framework_backend("torch", loss))("torch", loss)


def _point():
    rng = np.random.default_rng(0)
    params = {"weight": rng.standard_normal((6, 4)), "bias": rng.standard_normal(4)}
    signs = {k: np.where(rng.random(v.shape) < 0.5, -1, 1).astype(np.int8) for k, v in params.items()}
    return params, {"x": rng.standard_normal((3, 6))}, signs


def _copies(monkeypatch) -> list:
    """The shapes of the tensors a forward copies: a tensor tested by copy (``_copy``) and the inputs
    each call is handed a copy of (``_copied``)."""
    copied: list = []
    copy, handed = torch_side._copy, torch_side._copied

    def input_copy(value):
        if isinstance(value, torch_side.torch.Tensor):
            copied.append(tuple(value.shape))
        return handed(value)

    monkeypatch.setattr(torch_side, "_copy", lambda t: copied.append(tuple(t.shape)) or copy(t))
    monkeypatch.setattr(torch_side, "_copied", input_copy)
    return copied


@pytest.mark.parametrize("coefficients", [{}, {"weight": 1e-3}, {"weight": 1e-3, "bias": -2e-3}])
def test_an_evaluation_copies_only_the_inputs_and_gives_the_same_loss(coefficients, monkeypatch):
    params, inputs, signs = _point()
    backend = _adapter()
    backend.hold_point({k: v.copy() for k, v in params.items()}, inputs)
    backend.hold_direction("d", signs)
    copied = _copies(monkeypatch)
    value = backend.loss_along("d", coefficients)
    assert copied == [(3, 6)]  # the inputs' tensor only: the buffer is tested, not copied
    moved = {k: v + coefficients[k] * signs[k] if k in coefficients else v for k, v in params.items()}
    assert value.tobytes() == _adapter().loss(moved, inputs).tobytes()


@pytest.mark.parametrize("writes", ["weight", "bias"])
@pytest.mark.parametrize("coefficients", [{}, {"weight": 1e-3, "bias": 1e-3}])
def test_a_forward_that_writes_into_a_parameter_along_a_line_fails(writes, coefficients, monkeypatch):
    params, inputs, signs = _point()
    backend = _adapter(writes)
    backend.hold_point({k: v.copy() for k, v in params.items()}, inputs)
    backend.hold_direction("d", signs)
    copied = _copies(monkeypatch)
    with pytest.raises(torch_side.Misbehaved, match=f"changes its parameter `{writes}`"):
        backend.loss_along("d", coefficients)
    assert copied == [(3, 6)]


def test_other_signs_get_no_test_and_the_forward_copies_as_before(monkeypatch):
    params, inputs, signs = _point()
    backend = _adapter("weight")
    backend.hold_point({k: v.copy() for k, v in params.items()}, inputs)
    backend.hold_direction("d", {**signs, "weight": 2 * signs["weight"]})
    copied = _copies(monkeypatch)
    with pytest.raises(torch_side.Misbehaved, match="changes its parameter `weight`"):
        backend.loss_along("d", {"weight": 1e-3})
    assert sorted(copied) == [(3, 6), (6, 4)]  # the inputs and the weight (its signs not -1, 0, 1)


def test_the_buffer_test_finds_one_changed_bit_in_the_last_block():
    from crosscheck.backends.torch import buffer

    n = 2 * buffer.BLOCK + 5  # three blocks, the last one short
    rng = np.random.default_rng(1)
    base, signs = rng.standard_normal(n), np.where(rng.random(n) < 0.5, -1, 1).astype(np.int8)
    into = torch.add(torch.from_numpy(base), torch.from_numpy(signs).double(), alpha=3e-4)
    with buffer.checked(
        {"w": into}, {"w": torch.from_numpy(base)}, {"w": torch.from_numpy(signs)}, {"w": 3e-4}
    ):
        test = handed.test_of(into.numpy())
        assert test is not None and test()
        into.view(torch.int64)[-1] ^= 1  # one bit of the last entry
        assert not test()
    assert handed.test_of(into.numpy()) is None  # handed only inside


@pytest.mark.parametrize("changed", [-0.0, np.nan, "payload"])
def test_the_buffer_test_tells_a_signed_zero_and_a_nans_payload(changed):
    from crosscheck.backends.torch import buffer

    base, signs = np.array([1.0, 0.0, np.nan, 2.0]), np.array([1, 0, 0, -1], np.int8)
    held = base + 0.5 * signs.astype(np.float64)
    assert buffer._holds(held, base, signs, np.float64(0.5))
    if changed == "payload":
        held.view(np.uint64)[2] ^= 1  # another NaN
        assert np.isnan(held[2])
    else:
        held[1 if changed == -0.0 else 3] = changed
    assert not buffer._holds(held, base, signs, np.float64(0.5))
