"""The write check of the PyTorch adapter's buffer along a line (``loss_along``), without a copy of it.

A port's PyTorch forward (``torch_side.call``) copies every tensor it is handed and compares each after
the forward, to name a write into one (the rule: a forward leaves its inputs, parameters and buffers as
they were). Along a line those tensors are the adapter's buffer, rewritten whole each evaluation: a
copy of the model per evaluation, most of the forward's cost on GPT-2 small. The adapter
knows what the buffer holds (``point + c * signs``, or the point), so it hands ``torch_side.call`` a test
of that instead (``crosscheck._backends.handed``, as the engine's guarded call hands its own arrays'
tests): each tensor recomputed blockwise after the forward and compared bit for bit with the buffer.

The recomputation rounds as ``torch.add(point, signs, alpha=c)`` does only where ``c * signs`` is
exact: signs of -1, 0 and 1 (``exact``, tested once a direction: the oracle's). A tensor moved along
other signs gets no test (the forward copies and compares it as before).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch

from crosscheck._backends import handed

#: Entries recomputed and compared at a time (8 MiB of float64: enough for PyTorch's threads to share).
BLOCK = 1 << 20


def exact(signs: np.ndarray) -> bool:
    """Whether every sign is -1, 0 or 1 (``c * sign`` exact for any float64 ``c``)."""
    return not signs.size or (int(signs.min()) >= -1 and int(signs.max()) <= 1)


@contextlib.contextmanager
def checked(
    buffer: dict[str, Any], point: dict[str, Any], signs: dict[str, Any], coefficients: dict[str, float]
) -> Iterator[None]:
    """While inside, each of ``buffer``'s tensors (``name -> tensor``) is handed with the test that it
    still holds ``point[k] + coefficients[k] * signs[k]`` (``point[k]`` without a coefficient); a
    tensor whose test cannot be made (not float64 or not contiguous; moved, its signs not in ``signs``:
    not ``exact``) is left to the forward's own copy."""
    arrays, tests = [], []
    for k, into in buffer.items():
        if k in coefficients and k not in signs:
            continue
        test = _test(into, point[k], signs[k] if k in coefficients else None, coefficients.get(k))
        if test is not None:
            arrays.append(into.numpy())
            tests.append(test)
    with handed.handing(arrays, tests):
        yield


def _test(into: Any, base: Any, sign: Any, c: float | None) -> Callable[[np.ndarray], bool] | None:
    held, at = into.numpy(), base.numpy()
    moves = None if sign is None else sign.numpy()
    if (
        held.dtype != np.float64
        or at.dtype != np.float64
        or not (held.flags.c_contiguous and at.flags.c_contiguous)
    ):
        return None
    if moves is not None and (
        moves.dtype != np.int8 or not moves.flags.c_contiguous or moves.shape != held.shape
    ):
        return None
    if moves is None:
        return lambda a: handed.same_bits(a, at)
    step = np.float64(c)
    return lambda a: _holds(a.reshape(-1), at.reshape(-1), moves.reshape(-1), step)


def form(into: torch.Tensor, base: torch.Tensor, signs: torch.Tensor, c: float) -> None:
    """Write ``base + c * signs`` into ``into`` as ``loss_along`` forms it: the signs copied in as
    float64, then ``torch.add(base, into, alpha=c)``; a block of ``BLOCK`` entries at a time where all
    three are contiguous and of one shape, each block's copy still in cache for its sum (one pass over
    memory fewer: 0.077 to 0.059 s a point on GPT-2 small's 124 million entries, this project's 2-core
    machine). Each entry gets the same operations on the same numbers either way: the same
    bits."""
    same = into.shape == base.shape == signs.shape
    if not (same and into.is_contiguous() and base.is_contiguous() and signs.is_contiguous()):
        into.copy_(signs)
        torch.add(base, into, alpha=c, out=into)
        return
    h, b, s = into.view(-1), base.view(-1), signs.view(-1)
    for i in range(0, h.numel(), BLOCK):
        t = h[i : i + BLOCK]
        t.copy_(s[i : i + BLOCK])
        torch.add(b[i : i + BLOCK], t, alpha=c, out=t)


def _holds(held: np.ndarray, base: np.ndarray, signs: np.ndarray, c: np.float64) -> bool:
    """Whether ``held`` is ``base + c * signs`` (the product exact, the sum rounded once), bit for bit:
    recomputed a block at a time by the ops that formed it (``copy_`` of the signs, ``torch.add`` with
    ``alpha``), on PyTorch's threads (0.06 s against NumPy's 0.13 s for GPT-2 small's 124 million
    entries on this project's 2-core machine)."""
    h, b, s = (torch.from_numpy(a) for a in (held, base, signs))
    tmp = torch.empty(min(BLOCK, h.numel()), dtype=torch.float64)
    for i in range(0, h.numel(), BLOCK):
        j = min(i + BLOCK, h.numel())
        t = tmp[: j - i]
        t.copy_(s[i:j])
        torch.add(b[i:j], t, alpha=float(c), out=t)
        if not torch.equal(t.view(torch.int64), h[i:j].view(torch.int64)):
            return False
    return True
