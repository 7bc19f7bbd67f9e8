"""``crosscheck replay``: re-run a bundle's backends through the guarded call; bit for bit or not."""

from __future__ import annotations

from typing import Any

import numpy as np

from crosscheck._engine.driver import Caller
from crosscheck._engine.load import load
from crosscheck._report.bundle import bitwise
from crosscheck._workloads.stack.workload import STACK


def replay(bundle: dict[str, Any]) -> list[dict[str, Any]]:
    """Re-run every backend of the bundle that can be loaded again; say whether it reproduces bit for bit.

    Each backend gets private copies of the bundle's arrays, checked bit for bit after its call (so a
    backend that writes to them is caught, not the next one blamed).
    """
    saved_backends = bundle["meta"]["report"]["backends"]
    rows = []
    for name, saved in bundle["gradients"].items():
        record = saved_backends.get(name, {})
        spec = record.get("notes", {}).get("spec")
        row = {"backend": name, "spec": spec}
        if spec is None:
            rows.append({**row, "status": "not replayable (an object, not a name or import string)"})
            continue
        rows.append({**row, **_rerun(spec, record.get("role") == "reference", saved, bundle)})
    return rows


def _rerun(spec: str, reference: bool, saved: np.ndarray, bundle: dict[str, Any]) -> dict[str, Any]:
    backend, result = load(STACK, spec, required=True)
    if backend is None:
        return {"status": f"{result.status}: {result.error}"}
    arrays = {"weights": np.array(bundle["weights"]), "x": np.array(bundle["x"])}
    call = Caller(arrays)
    oracle = reference and callable(getattr(backend, "estimate", None))
    if oracle:
        out = call(backend.estimate, arrays["weights"], arrays["x"])
    else:
        out = call(backend.grad, arrays["weights"], arrays["x"], convert="array")
    if out.error is not None:
        return {"status": f"failed: {out.error}"}
    return bitwise(saved, out.value.value if oracle else out.value)
