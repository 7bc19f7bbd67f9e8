"""``crosscheck replay``: re-run a bundle's backends through the guarded call; bit for bit or not.

The bundle's workload is loaded again (``load_workload``, with the name or import string the bundle
records), its judge is made at the bundle's arrays, and each backend runs as the run ran it: a
candidate through the judge's ``evaluate``, the reference through its ``reference`` (the oracle
estimates again, every entry). Each value is compared with the saved one, parameter by parameter.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from crosscheck._engine.driver import Caller
from crosscheck._engine.load import load
from crosscheck._engine.quantity import quantity as _quantity
from crosscheck._report.bundle import bitwise
from crosscheck._workloads.protocol import Options, Point
from crosscheck._workloads.registry import load_workload


def replay(bundle: dict[str, Any]) -> list[dict[str, Any]]:
    """Re-run every backend of the bundle that can be loaded again; say whether it reproduces bit for bit.

    Returns one row per saved backend: ``backend``, ``spec`` (None: an object, which cannot be loaded
    again), ``status`` (``bit for bit``, ``differs``, ``failed: ...``, ``not replayable ...``) and, when
    it differs, a ``detail``. The arrays a backend is given are checked bit for bit after its call and
    put back when it wrote to them (the guarded call), so no backend sees another's writes.
    """
    saved_backends = bundle["meta"]["report"]["backends"]
    specs = {name: saved_backends.get(name, {}).get("notes", {}).get("spec") for name in bundle["gradients"]}
    try:
        workload, judge, call = _setup(bundle)
    except (ValueError, TypeError) as exc:
        why = f"not replayable: workload `{bundle['workload']}` cannot be loaded again: {exc}"
        return [{"backend": name, "spec": spec, "status": why} for name, spec in specs.items()]
    rows = []
    for name, saved in bundle["gradients"].items():
        row = {"backend": name, "spec": specs[name]}
        if specs[name] is None:
            rows.append({**row, "status": "not replayable (an object, not a name or import string)"})
            continue
        reference = saved_backends.get(name, {}).get("role") == "reference"
        rows.append({**row, **_rerun(workload, judge, call, specs[name], reference, saved)})
    return rows


def _setup(bundle: dict[str, Any]) -> tuple[Any, Any, Caller]:
    """The workload, its judge at the bundle's arrays (private copies) and the guarded call on them.

    Raises:
        ValueError, TypeError: the workload cannot be loaded, or judged at these arrays.
    """
    workload = load_workload(bundle["workload"])
    params = {k: np.array(v) for k, v in bundle["params"].items()}
    inputs = {k: np.array(v) for k, v in bundle["inputs"].items()}
    report = bundle["meta"]["report"]
    case = dict(report.get("case", {}))
    dtype = next(iter(params.values())).dtype.name
    point = Point(params, inputs, case, dtype)
    # Every entry: a reference saved in full is re-estimated in full (screening saves no value).
    options = Options(seed=int(case.get("seed", 0)), oracle_mode="full")
    judge = workload.judge(_quantity(report.get("quantity", "grad")), point, options)
    return workload, judge, Caller(point.arrays())


def _rerun(
    workload: Any, judge: Any, call: Caller, spec: str, reference: bool, saved: dict[str, np.ndarray]
) -> dict[str, Any]:
    try:
        backend, result = load(workload, spec, required=True)
    except (ValueError, TypeError) as exc:
        return {"status": f"not replayable: {exc}"}
    if backend is None:
        return {"status": f"{result.status}: {result.error}"}
    out = judge.reference(backend, call) if reference else judge.evaluate(backend, call)
    if out.error is not None:
        return {"status": f"failed: {out.error}"}
    value = out.value.value if reference else out.value
    return same_values(saved, value)


def same_values(saved: dict[str, np.ndarray], value: Any) -> dict[str, Any]:
    """``{"status": "bit for bit"}`` when every saved parameter came back bit for bit, else the first
    that did not, in ``detail``."""
    if not isinstance(value, dict):
        return {"status": "differs", "detail": f"it returned {type(value).__name__}, not arrays by parameter"}
    for key, array in saved.items():
        if value.get(key) is None:
            return {"status": "differs", "detail": f"`{key}` is missing from what it returned"}
        found = bitwise(array, np.asarray(value[key]))
        if found["status"] != "bit for bit":
            return {"status": "differs", "detail": f"`{key}`: {found['detail']}"}
    return {"status": "bit for bit"}
