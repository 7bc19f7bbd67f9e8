"""A bundle's arrays must be the case it claims, before a replay (``rerun``) runs anything on them.

A generated case (the stack's knobs, a workload's generator) is made again and compared bit for bit
with the arrays the bundle holds. "User arrays" (``--weights/--x``, ``Stack.from_arrays``) cannot be
made again: they are validated as the run validated them (the workload configured with them, so the
stack's ``check_inputs`` refuses a wrong shape, dtype or a NaN), and the case record they make (their
shape, dtype and SHA-256) must be the one the bundle records, hashes included: a bundle that says "user
arrays" and records no hash of one of them is refused, never replayed unchecked.

Before either is made, the case's memory is estimated as ``crosscheck run`` estimates it (the workload's
``memory``, with the replay's options: the oracle in full), and a case that cannot fit in this
machine's memory is refused with its estimate: a record is a line of text, and ``dim=10**6`` would
otherwise be an allocation of petabytes.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from crosscheck._engine.plan import MemoryTooLarge, check_memory
from crosscheck._errors import one_line
from crosscheck._records import Oracle
from crosscheck._report.bundle import bitwise
from crosscheck._workloads.protocol import Options, Point

#: The case record's ``source`` of arrays the user gave (the stack's ``from_arrays``).
USER_ARRAYS = "user arrays"


def check_case(workload: Any, bundle: dict[str, Any]) -> None:
    """The bundle's case record must make its arrays, bit for bit; user arrays must be valid arrays of
    the workload with the SHA-256 the record claims.

    Raises:
        ValueError: they are not (the file was changed, or its record was, or it was crafted), or the
            case cannot fit in this machine's memory (``MemoryTooLarge``, with the estimate).
    """
    case = bundle["meta"]["report"]["case"]
    held = {**bundle["params"], **bundle["inputs"]}
    if case.get("source") == USER_ARRAYS:
        point, shown = _user_point(workload, bundle, held), "user arrays"
    else:
        point, shown = _case_point(workload, bundle)
    made = {**point.params, **point.inputs}
    if set(made) != set(held):
        raise ValueError(
            f"the bundle's case record ({shown}) makes the arrays {_names(made)}; the bundle holds "
            f"{_names(held)}: the file was changed after it was written."
        )
    for name, array in held.items():
        differs = _differs(made[name], array)
        if differs:
            raise ValueError(
                f"the bundle's case record ({shown}) does not make its `{one_line(name)[:40]}` array "
                f"({differs}): the file was changed after it was written."
            )


def _case_point(workload: Any, bundle: dict[str, Any]) -> tuple[Point, str]:
    """The point a generated case's record makes, and the record as shown in a message."""
    case = bundle["meta"]["report"]["case"]
    # What the workload takes (the stack's knobs) and the case's dtype and seed, in the record's order.
    keys = (workload.takes - {"weights", "x"}) | {"dtype", "seed"}
    given = {k: v for k, v in case.items() if k in keys}
    shown = ", ".join(f"{k}={one_line(str(v))[:40]}" for k, v in given.items())
    known = {k: v for k, v in given.items() if v is not None}  # a null is the default
    dtype = known.get("dtype", "float32")
    try:
        configured = workload.configure(**{k: v for k, v in known.items() if k in workload.takes})
        _fits(configured, bundle, dtype, shown)
        point = configured.point(dtype=dtype, seed=known.get("seed", 0))
    except MemoryTooLarge:
        raise
    except (ValueError, TypeError) as exc:
        raise ValueError(f"the bundle's case record ({shown}) is not a case: {one_line(str(exc))}") from exc
    return point, shown


def _fits(configured: Any, bundle: dict[str, Any], dtype: Any, shown: str) -> None:
    """Refuse a replay of ``configured`` that cannot fit in this machine's memory, estimated as
    ``crosscheck run`` estimates a case: the bundle's quantity and candidates, the oracle in full (a
    replay re-estimates every entry).

    Raises:
        MemoryTooLarge: it cannot fit (the message gives the record, ``shown``, and the estimate by part).
    """
    report = bundle["meta"]["report"]
    records = [r for r in report["backends"].values() if r.get("role") != "reference"]
    specs = [(record.get("notes") or {}).get("spec") for record in records]
    candidates = [spec for spec in specs if isinstance(spec, str)]
    options = Options(oracle=Oracle("full"))
    quantity = str(report.get("quantity", "grad"))
    try:
        check_memory(configured, dtype=str(dtype), quantity=quantity, options=options, candidates=candidates)
    except MemoryTooLarge as exc:
        raise MemoryTooLarge(f"cannot replay the bundle's case ({shown}): {exc}") from exc


def _user_point(workload: Any, bundle: dict[str, Any], held: dict[str, np.ndarray]) -> Point:
    """The point the workload makes of the bundle's user arrays, validated as ``--weights/--x`` are
    and checked against every field of the record they make (shape, dtype, SHA-256 of each)."""
    case = bundle["meta"]["report"]["case"]
    names = ", ".join(f"`{one_line(n)[:40]}`" for n in held)
    if not set(held) <= workload.takes:
        raise ValueError(
            f"the bundle's case record says user arrays ({names}), but its workload "
            f"`{one_line(bundle['workload'])[:80]}` takes no such arrays."
        )
    unhashed = [name for name in held if not isinstance(case.get(f"{name}_sha256"), str)]
    if unhashed:
        raise ValueError(
            f"the bundle's case record says user arrays but records no SHA-256 of its "
            f"`{one_line(unhashed[0])[:40]}` array (`{one_line(unhashed[0])[:40]}_sha256`): "
            "the file was changed after it was written."
        )
    dtype = str(case.get("dtype", "float32"))
    try:
        configured = workload.configure(**held)
        _fits(configured, bundle, dtype, "user arrays")
        point: Point = configured.point(dtype=dtype, seed=0)
    except MemoryTooLarge:
        raise
    except (ValueError, TypeError) as exc:
        raise ValueError(f"the bundle's user arrays are not valid: {one_line(str(exc))}") from exc
    for key, value in point.case.items():
        if case.get(key) != value:
            raise ValueError(
                f"the bundle's case record says {one_line(key)[:40]}={one_line(repr(case.get(key)))[:80]}, "
                f"its user arrays make {one_line(repr(value))[:80]}: the file was changed after it was "
                "written."
            )
    return point


def _names(arrays: dict[str, Any]) -> str:
    return ", ".join(f"`{one_line(name)[:40]}`" for name in sorted(arrays)) or "none"


def _differs(made: np.ndarray, held: np.ndarray) -> str:
    """How the array a case makes differs from the one a bundle holds ("" when bit for bit)."""
    if made.shape != held.shape or made.dtype != held.dtype:
        return f"the case makes {made.dtype.name}{made.shape}, the bundle holds {held.dtype.name}{held.shape}"
    found = bitwise(made, held)
    return "" if found["status"] == "bit for bit" else found["detail"]
