"""The optimizer state at the start, mapped like the parameters: PyTorch's ``optimizer.state`` (per
parameter tensor: ``step``, ``exp_avg``, ...) and the optax state's parts shaped like the parameter tree
(``mu``, ``nu``, ``trace``) or scalar (``count``), paired by kind (``PAIRS``) and, within a kind, by the
parameters' PyTorch names (the port's mapping), then compared entry by entry before the first step.

Each side hands its start state over with its trajectories, one array a parameter and kind, keyed
``"name (kind)"`` in its own framework's kind (``"h.0.ln_1.weight (exp_avg)"``, ``"... (mu)"``); a
scalar part (optax's ``count``) is repeated for every parameter. Nothing here imports a framework.

Only the start is compared: every later state shows in the parameters it moves, which are compared at
every step, while a moment of a gradient that is rounding noise (GPT-2's attention key bias) has no
float64 counterpart to measure its rounding against.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from crosscheck._types import Console, Loaded
from crosscheck._workloads.train.runs import Runs

if TYPE_CHECKING:
    from crosscheck._report.report import Report

#: PyTorch's state kind -> optax's (``torch.optim``'s Adam, AdamW and SGD; optax's ``scale_by_adam``,
#: ``scale_by_amsgrad`` and ``trace``).
PAIRS = {
    "step": "count",
    "exp_avg": "mu",
    "exp_avg_sq": "nu",
    "max_exp_avg_sq": "nu_max",
    "momentum_buffer": "trace",
}


def key(name: str, kind: str) -> str:
    """A state array's key: ``"name (kind)"``."""
    return f"{name} ({kind})"


def split(value: Mapping[str, Any], parameters: Iterable[str]) -> tuple[dict, dict[str, dict[str, Any]]]:
    """A side's value as its trajectories (by parameter) and its start state (kind -> name -> array)."""
    names = set(parameters)
    params: dict[str, Any] = {}
    state: dict[str, dict[str, Any]] = {}
    for k, v in value.items():
        name, _, kind = k[:-1].rpartition(" (") if k.endswith(")") else (k, "", "")
        if k in names or name not in names:
            params[k] = v
        else:
            state.setdefault(kind, {})[name] = v
    return params, state


def pairing(torch_kinds: Iterable[str], jax_kinds: Iterable[str]) -> list[dict[str, Any]]:
    """The state's table: a row per kind, paired (``PAIRS``) or on one side only."""
    jax_kinds = list(jax_kinds)
    rows = []
    for kind in torch_kinds:
        other = PAIRS.get(kind)
        paired = other in jax_kinds
        rows.append({"torch": kind, "optax": other if paired else None})
    used = {r["optax"] for r in rows}
    rows += [{"torch": None, "optax": kind} for kind in jax_kinds if kind not in used]
    return rows


def as_torch(state: Mapping[str, Mapping[str, Any]], rows: list[dict[str, Any]], side: str) -> dict:
    """``side``'s paired state keyed in PyTorch's kinds: ``"name (exp_avg)" -> array``."""
    out = {}
    for row in rows:
        if row["torch"] is not None and row["optax"] is not None:
            for name, v in state.get(row[side], {}).items():
                out[key(name, row["torch"])] = np.asarray(v)
    return out


def render(rows: list[dict[str, Any]]) -> str:
    """The table, in a few lines, before the numbers."""
    if not rows:
        return "optimizer state: neither side has any at the start or after the first step (nothing paired)"
    lines = ["optimizer state at the start, paired by kind and by the parameters' PyTorch names:"]
    for row in rows:
        torch, optax = row["torch"], row["optax"]
        if torch is not None and optax is not None:
            lines.append(f"  torch `{torch}` <-> optax `{optax}`: {row.get('parameters', 0)} parameters")
        else:
            one = f"torch `{torch}`" if torch is not None else f"optax `{optax}`"
            lines.append(f"  {one}: on one side only, not compared")
    return "\n".join(lines)


def compared(judge: Any, backend: Loaded, name: str, reference_name: str) -> tuple[list[dict], list[Any]]:
    """The state's table and one comparison per paired parameter and kind (its start state, step 0),
    ``backend`` (a candidate) against the judge's reference backend, each side's float32 start state
    within its measured rounding (its float64 re-run's)."""
    sides = (backend, judge.reference_backend)
    starts = [[judge.starts.get((id(b), dtype), {}) for dtype in ("float32", "float64")] for b in sides]
    kinds = {b.name: list(s[0]) for b, s in zip(sides, starts, strict=True)}
    rows = pairing(kinds.get("torch", []), kinds.get("jax", []))
    runs = []
    for b, (main, wide) in zip(sides, starts, strict=True):
        side = "torch" if b.name == "torch" else "optax"
        runs.append(Runs(as_torch(main, rows, side), as_torch(wide, rows, side)))
    common = [k for k in runs[1].main if k in runs[0].main and k in runs[0].wide and k in runs[1].wide]
    for row in rows:
        row["parameters"] = sum(k.endswith(f" ({row['torch']})") for k in common) if row["optax"] else 0
    keep = [Runs({k: r.main[k] for k in common}, {k: r.wide[k] for k in common}) for r in runs]
    found = judge.judged(keep[0], keep[1], name, reference_name)
    return rows, found


def render_section(report: Report, console: Console) -> None:
    """The state's table (the case's ``optimizer_state``), before the numbers."""
    if isinstance(report.case.get("optimizer_state"), list):
        console.print(render(report.case["optimizer_state"]), highlight=False, markup=False)
