"""Whether a "float64" run computed in float32: a module pinned to float32 (``ran_in_float32``).

The float64 run a rounding is measured from is checked, not trusted (``rounding.measure``): a module
pinned to float32 (a Flax module built with ``dtype=float32``, a PyTorch module that casts) computes in
float32 whatever it is given, so its "float64" result is the float32 result, bit for bit, or at least
float32 numbers in every entry.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

#: A float64 result with at least this many nonzero entries, every one a float32 number, was computed
#: in float32 (a true float64 result has ~29 more significant bits, which are almost never all zero).
FLOAT32_EXACT_ENTRIES = 8


def ran_in_float32(wide: dict[str, np.ndarray], narrow: dict[str, np.ndarray]) -> bool:
    """Whether the "float64" run computed in float32: it equals the float32 run bit for bit (and is not
    all zero), or every entry of it is a float32 number (``FLOAT32_EXACT_ENTRIES`` nonzero at least).
    A parameter at a time, a block at a time (``SAME_BLOCK``), each test stopped at the first block that
    says no (a true float64 run differs in its first): never a float64 copy of them all, and the nonzero
    entries counted only where a test said yes."""
    if all(_same(w, narrow[k]) for k, w in wide.items()):
        return _nonzero(wide, 1)
    return all(_float32_numbers(w) for w in wide.values()) and _nonzero(wide, FLOAT32_EXACT_ENTRIES)


#: Entries ``ran_in_float32``'s tests compare at once.
SAME_BLOCK = 1 << 16


def _nonzero(arrays: dict[str, np.ndarray], least: int) -> bool:
    """Whether ``arrays`` hold at least ``least`` nonzero entries together."""
    found = 0
    for a in arrays.values():
        found += int(np.count_nonzero(a))
        if found >= least:
            return True
    return False


def _blocks(*arrays: np.ndarray) -> Iterator[tuple[np.ndarray, ...]]:
    """The same ``SAME_BLOCK`` entries of each of ``arrays`` (C-ordered, of one shape), in turn; one block
    of the whole arrays where they are not C-ordered."""
    if not all(a.flags.c_contiguous for a in arrays):
        yield arrays
        return
    flat = [a.reshape(-1) for a in arrays]
    for i in range(0, flat[0].size, SAME_BLOCK):
        yield tuple(f[i : i + SAME_BLOCK] for f in flat)


def _same(wide: np.ndarray, narrow: np.ndarray) -> bool:
    """Whether ``wide`` and ``narrow`` hold the same numbers in float64 (a float32 array compared with a
    float64 one is widened entry by entry, exactly: no float64 copy of it)."""
    narrow = np.asarray(narrow)
    if narrow.dtype not in (np.float32, np.float64):
        narrow = narrow.astype(np.float64)
    wide = np.asarray(wide, np.float64)
    if wide.shape != narrow.shape:
        return False
    return all(np.array_equal(w, n) for w, n in _blocks(wide, narrow))


def _float32_numbers(wide: np.ndarray) -> bool:
    w = np.asarray(wide, np.float64)
    with np.errstate(over="ignore", invalid="ignore"):  # the float32 copy widened in the comparison
        return all(np.array_equal(b.astype(np.float32), b) for (b,) in _blocks(w))
