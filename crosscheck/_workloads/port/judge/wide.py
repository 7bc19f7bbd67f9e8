"""Which side of a port computed wider than the 16-bit dtype asked, told by its model output.

A port's loss is a projection of the model's output in the case's dtype, so its gradient carries that
dtype's rounding even where the model itself upcasts to float32: the gradient cannot tell the side's
arithmetic (``rounding.unrounded`` on it finds rounding the projection made). The model output can: a
side whose 16-bit output is its float32 re-run's rounded once (or not rounded at all) computed in
float32. The words and the failure are the 16-bit verdict's (``low.wide_only``, ``low.not_checked``),
through the model judge's ``wide_only``, the one record of which side computed wider.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from crosscheck._compare import low
from crosscheck._compare.dtypes import is_float, is_low
from crosscheck._workloads.model.rounding import unrounded

if TYPE_CHECKING:
    from crosscheck._workloads.port.sides.torch_side import ModuleCall


def sides(torch_runs: Any, jax_runs: Any, name: str, dtype: str) -> dict[str, bool]:
    """Per side (``torch``, and the candidate ``name``), in a 16-bit case, whether its model output
    computed in float32 (``unrounded``); a side without both runs' floating outputs is not judged."""
    if not is_low(dtype):
        return {}
    out = {}
    for side, runs in (("torch", torch_runs), (name, jax_runs)):
        found = _wide(_top(runs.main), _top(runs.other), dtype)
        if found is not None:
            out[side] = found
    return out


def _top(records: Sequence[ModuleCall]) -> ModuleCall | None:
    """The model's own record (the last named ``""``), None without one."""
    return next((r for r in reversed(records) if r.name == ""), None)


def _wide(main: Any, other: Any, dtype: str) -> bool | None:
    if main is None or other is None or len(main.outputs) != len(other.outputs):
        return None
    pairs = [
        (np.asarray(a, np.float64), np.asarray(b, np.float64))
        for a, b in zip(main.outputs, other.outputs, strict=True)
        if is_float(np.asarray(a)) and np.shape(a) == np.shape(b) and np.size(a)
    ]
    if not pairs:
        return None
    value = {str(i): a for i, (a, _) in enumerate(pairs)}
    again = {str(i): b for i, (_, b) in enumerate(pairs)}
    return unrounded(value, again, {k: v.shape for k, v in value.items()}, dtype)


def said(wide: dict[str, bool], dtype: str, text: str = "") -> str:
    """The verdict's sentences on the sides that computed in float32 ("" when none did), but those
    ``text`` says already."""
    sentences = [low.wide_only(side, dtype) for side, found in wide.items() if found]
    return "".join(f"; {s}" for s in sentences if s not in text)


def merge(judge: Any, wide: dict[str, bool], dtype: str) -> None:
    """Each side's finding put on the model ``judge``'s ``wide_only`` (a side wide by its output or by
    its gradient is wide: ``low.unchecked`` fails a check in which no side computed in the dtype), and
    the 16-bit pass of a side found wide told so."""
    for side, found in wide.items():
        judge.wide_only[side] = judge.wide_only.get(side, False) or found
        verdict = judge.verdicts.get(side)
        sentence = low.wide_only(side, dtype)
        if found and verdict is not None and sentence not in verdict.text:
            judge.verdicts[side] = dataclasses.replace(verdict, text=f"{sentence}; {verdict.text}")
