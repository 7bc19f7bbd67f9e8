"""What a backend call returned, converted once: a private NumPy copy, or why there is none.

``None``, something that is not an array, an object array are failures with a precise message; a
framework's own array is converted by its folder's ``arrays.py`` (a PyTorch tensor that requires grad
is detached, safe: only the values are compared, and the record says so).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from crosscheck._backends import in_use
from crosscheck._compare.dtypes import is_float
from crosscheck._errors import Interrupts, describe, reraise_user_interrupt


def to_array(
    value: Any, what: str = "", *, interrupts: Interrupts | None = None
) -> tuple[np.ndarray | None, str | None, dict[str, str]]:
    """``(array, error, notes)``: a private NumPy copy of a backend's result, or why there is none
    (``interrupts``: the Ctrl-C policy, as for ``guarded``)."""
    where = f" for {what}" if what else ""
    if value is None:
        return None, f"returned None{where} instead of an array (a missing `return`?)", {}
    notes = {}
    for framework in in_use():  # a framework's own array type (a tensor that requires grad, say)
        value, note = framework.module("arrays").to_numpy(value)
        if note:
            notes["converted"] = note
    try:
        # asarray, then a copy: NumPy 2 warns when it passes `copy=` to an `__array__` without it.
        array = np.asarray(value).copy()
    except BaseException as exc:
        reraise_user_interrupt(exc, interrupts)
        return None, f"returned something that is not an array{where}: {describe(exc)}", {}
    if not (np.issubdtype(array.dtype, np.number) or array.dtype == bool or is_float(array)):
        found = f"{type(value).__name__} of dtype {array.dtype.name}"
        return None, f"returned something that is not an array of numbers{where}: {found}", {}
    return array, None, notes


def to_arrays(
    value: Any, *, interrupts: Interrupts | None = None
) -> tuple[dict[str, np.ndarray] | None, str | None, dict[str, str]]:
    """A workload backend's ``{parameter: array}``, each converted by ``to_array``."""
    if not isinstance(value, Mapping):
        found = "None (a missing `return`?)" if value is None else type(value).__name__
        return None, f"returned {found}; expected a dict of gradients keyed by parameter name", {}
    out: dict[str, np.ndarray] = {}
    notes: dict[str, str] = {}
    # A copy of the mapping, emptied as it is converted: a result the backend no longer holds (a torch
    # gradient) is freed a tensor at a time, not kept until every copy is made.
    items = dict(value.items())
    del value
    while items:
        key = next(iter(items))
        array, error, more = to_array(items.pop(key), f"parameter `{key}`", interrupts=interrupts)
        if error or array is None:
            return None, error, {}
        out[str(key)], notes = array, {**notes, **more}
    return out, None, notes
