"""The arrays a guarded call has handed the backend it runs, while it runs, each with the test the engine
makes of it after the call (whether it still holds what it was handed: its bits against the array it
was copied from, or the source it was cast from).

The engine's guarded call (``crosscheck._engine.call.guarded``) lists them here (``handing``); code
running inside the call that must know at once whether something wrote into a handed array (the
PyTorch side of a port names the tensor its forward changed: ``torch_side.call``) asks ``test_of``
instead of keeping a copy of its own to compare with (a copy of every parameter, 4 or 8
bytes each, made and compared on each forward pass). Only an array that is exactly one handed (the
same memory, shape, dtype and strides) has a test; for anything else the caller keeps its copy.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Callable, Iterator, Sequence

import numpy as np

#: Handed array's key (``_key``) -> (the array, the test of it). Guarded calls in several threads each
#: add and remove their own (their arrays are distinct memory).
_HANDED: dict[tuple, tuple[np.ndarray, Callable[[np.ndarray], bool]]] = {}
_LOCK = threading.Lock()


def _key(array: np.ndarray) -> tuple:
    return (array.__array_interface__["data"][0], array.shape, array.dtype.str, array.strides)


@contextlib.contextmanager
def handing(arrays: Sequence[np.ndarray], tests: Sequence[Callable[[np.ndarray], bool]]) -> Iterator[None]:
    """While inside, ``test_of(a)`` of each of ``arrays`` (not empty ones) is its test (``tests[i](a)``:
    whether it holds what it was handed)."""
    keys = []
    with _LOCK:
        for array, test in zip(arrays, tests, strict=True):
            if isinstance(array, np.ndarray) and array.size:
                keys.append(_key(array))
                _HANDED[keys[-1]] = (array, test)
    try:
        yield
    finally:
        with _LOCK:
            for key in keys:
                _HANDED.pop(key, None)


def test_of(array: np.ndarray) -> Callable[[], bool] | None:
    """Whether ``array`` still holds what it was handed with (a function of no argument), when it is
    exactly an array a guarded call running now has handed (the same memory, shape, dtype and strides);
    None when it is not."""
    if not array.size:
        return None
    entry = _HANDED.get(_key(array))
    if entry is None:
        return None
    handed, test = entry
    return lambda: test(handed)


def same_bits(a: np.ndarray, b: np.ndarray, block: int = 1 << 20) -> bool:
    """Whether two arrays of one shape and dtype hold the same bits (NaN payloads and signed zeros
    included), compared ``block`` entries at a time (no temporary of their size)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype.itemsize not in (1, 2, 4, 8) or a.dtype.hasobject or a.dtype.fields is not None:
        return a.tobytes() == b.tobytes()
    kind = np.dtype(f"u{a.dtype.itemsize}")
    if not (a.flags.c_contiguous and b.flags.c_contiguous):
        return bool(np.array_equal(a.view(kind), b.view(kind)))
    x, y = a.reshape(-1).view(kind), b.reshape(-1).view(kind)
    return all(np.array_equal(x[i : i + block], y[i : i + block]) for i in range(0, x.size, block))


def let_go() -> None:
    """Let a framework give back now the arrays it read in place.

    JAX reads a 64-byte aligned NumPy array without a copy (``jax.device_put(may_alias=True)``, as the
    JAX adapter's gradient does), and XLA gives back its reference to the array only at its own garbage
    collection, which JAX runs from Python's garbage collector callbacks (``gc.callbacks``;
    jax-ml/jax#14882). Until then an array made for one call outlived it: the float64 re-run's
    parameters, 8 bytes a parameter, were still held while its gradient was measured. A collection of
    the youngest generation runs the callbacks and costs next to nothing.

    The JAX adapter calls it once its device arrays are dropped, and the engine after every guarded
    call, once the arrays it made for the call are dropped (a module capture's arrays too). XLA's own
    threads may let go of a computation's arguments a moment after its results are ready: then the
    arrays go at the next collection instead (seen in 1 to 3 of 40 calls of a gradient, the
    adapter's collection alone)."""
    gc.collect(0)
