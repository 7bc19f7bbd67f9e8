"""Repro bundles: one ``.npz`` with every parameter and input array, every backend's value per
parameter, the workload, the case and the environment.

Loaded without pickle: arrays, plus the metadata as a JSON string in a 0-d unicode array. Array names
are numbered (``param_0``, ``input_0``, ``value_1_0``: backend 1, parameter 0); the metadata lists the
names they stand for, so a parameter or backend may be called anything.

Version 2 holds any workload (the metadata's ``"workload"`` is what ``load_workload`` takes again);
version 1 bundles (the stack's ``weights``, ``x`` and ``gradient_<i>``) load as the stack's.
"""

from __future__ import annotations

import hashlib
import json
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from crosscheck._report.report import Report

MARKER = "crosscheck-bundle"
VERSION = 2
#: What reading a damaged or foreign archive raises (made one line by ``load_bundle``).
_UNREADABLE = (
    OSError,
    EOFError,
    zipfile.BadZipFile,
    KeyError,
    TypeError,
    AttributeError,
    json.JSONDecodeError,
)


def save_bundle(report: Report, path: str | Path, *, workload: str | None = None) -> None:
    """Write ``report``'s arrays, every backend's values and its JSON report to ``path`` (``.npz``).

    Args:
        workload: how ``crosscheck replay`` loads the workload again (a built-in name or an import
            string); default: the case's ``"workload"``, else ``"stack"``.

    Raises:
        ValueError: the report holds no inputs (one made by hand, not by a run).
    """
    if report.inputs is None:
        raise ValueError("the report holds no inputs to bundle (it was not made by `crosscheck.run`).")
    params, inputs = report.inputs
    values = {name: dict(value) for name, value in report.gradients.items()}
    meta = {
        "format": MARKER,
        "version": VERSION,
        "workload": workload or report.case.get("workload", "stack"),
        "parameters": list(params),
        "inputs": list(inputs),
        "values": {name: list(value) for name, value in values.items()},
        "report": report.to_dict(),
    }
    arrays: dict[str, Any] = {"meta": np.array(json.dumps(meta))}
    arrays.update({f"param_{i}": np.asarray(a) for i, a in enumerate(params.values())})
    arrays.update({f"input_{i}": np.asarray(a) for i, a in enumerate(inputs.values())})
    for b, value in enumerate(values.values()):
        arrays.update({f"value_{b}_{p}": np.asarray(a) for p, a in enumerate(value.values())})
    pickled = [key for key, a in arrays.items() if a.dtype.hasobject]
    if pickled:  # an object array would be stored as a pickle, which a bundle never holds
        raise ValueError(f"cannot bundle object arrays (they would be pickled): {', '.join(pickled)}")
    with open(path, "wb") as file:  # np.savez would append ".npz" to a path without it
        np.savez_compressed(file, **arrays)


def load_bundle(path: str | Path) -> dict[str, Any]:
    """Read a bundle: ``{"workload", "params", "inputs", "gradients": {backend: {parameter: array}},
    "meta"}`` (a version 1 bundle is the stack's: ``params`` ``{"weights"}``, ``inputs`` ``{"x"}``).

    Raises:
        ValueError: a missing, corrupt or foreign file, or arrays that are not the case's (one line:
            what was expected, what was found).
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"bundle not found: {path}")
    if not zipfile.is_zipfile(path):
        raise ValueError(f"{path} is not a crosscheck bundle: expected an .npz archive, found another file.")
    try:
        with np.load(path, allow_pickle=False) as data:
            if not isinstance(data, np.lib.npyio.NpzFile) or "meta" not in data.files:
                raise ValueError(f"{path} is not a crosscheck bundle (no `meta` entry).")
            meta = json.loads(str(data["meta"][()]))
            if not isinstance(meta, dict) or meta.get("format") != MARKER:
                found = meta.get("format") if isinstance(meta, dict) else meta
                raise ValueError(f"{path} is not a crosscheck bundle (format {found!r:.60}).")
            bundle = _version_1(data, meta) if meta.get("version") == 1 else _version_2(data, meta, path)
    except _UNREADABLE as exc:
        raise ValueError(
            f"{path} is not a readable crosscheck bundle ({type(exc).__name__}: {exc})."
        ) from exc
    except ValueError as exc:
        if "pickle" in str(exc).lower():
            raise ValueError(f"{path} holds pickled objects, which crosscheck never loads.") from exc
        raise
    _check_hashes(bundle, path)
    return bundle


def _version_1(data: Any, meta: dict[str, Any]) -> dict[str, Any]:
    """The stack's version 1 bundle: ``weights``, ``x`` and ``gradient_<i>`` per name in ``gradients``."""
    gradients = {name: {"weights": data[f"gradient_{i}"]} for i, name in enumerate(meta["gradients"])}
    params, inputs = {"weights": data["weights"]}, {"x": data["x"]}
    return {"workload": "stack", "params": params, "inputs": inputs, "gradients": gradients, "meta": meta}


def _version_2(data: Any, meta: dict[str, Any], path: Path) -> dict[str, Any]:
    if meta.get("version") != VERSION:
        raise ValueError(
            f"{path} is a crosscheck bundle of version {meta.get('version')!r:.20}; this crosscheck reads "
            f"versions 1 and {VERSION} (a newer crosscheck wrote it?)."
        )
    params = {str(k): data[f"param_{i}"] for i, k in enumerate(meta["parameters"])}
    inputs = {str(k): data[f"input_{i}"] for i, k in enumerate(meta["inputs"])}
    gradients = {
        str(name): {str(k): data[f"value_{b}_{p}"] for p, k in enumerate(keys)}
        for b, (name, keys) in enumerate(meta["values"].items())
    }
    workload = str(meta["workload"])
    return {"workload": workload, "params": params, "inputs": inputs, "gradients": gradients, "meta": meta}


def _check_hashes(bundle: dict[str, Any], path: Path) -> None:
    """Arrays whose SHA-256 the case records (your own arrays) must be those arrays."""
    case = bundle["meta"].get("report", {}).get("case", {})
    for name, array in {**bundle["params"], **bundle["inputs"]}.items():
        claimed = case.get(f"{name}_sha256")
        if claimed is not None and hashlib.sha256(array.tobytes()).hexdigest() != claimed:
            raise ValueError(f"{path}: its `{name}` array is not the one its case records (SHA-256 differs).")


def _bytes(array: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(array).reshape(-1).view(np.uint8)


def bitwise(saved: np.ndarray, value: np.ndarray) -> dict[str, Any]:
    """``{"status": "bit for bit"}``, or ``"differs"`` with a ``detail`` saying how."""
    if value.shape != saved.shape or value.dtype != saved.dtype:
        return {
            "status": "differs",
            "detail": f"{value.dtype}{value.shape} vs saved {saved.dtype}{saved.shape}",
        }
    # Bytes, not values: -0.0 is not 0.0, and a NaN's payload counts (a 0-d array is one entry).
    same = _bytes(saved) == _bytes(value)
    if np.all(same):
        return {"status": "bit for bit"}
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.abs(value.astype(np.float64) - saved.astype(np.float64))
    diff = np.where(np.isnan(diff), np.inf, diff)  # a NaN where the other is not (or another NaN)
    index = tuple(int(i) for i in np.unravel_index(int(np.argmax(diff)), diff.shape))
    changed = int(np.count_nonzero(same.reshape(-1, max(saved.dtype.itemsize, 1)).all(axis=1) == 0))
    return {
        "status": "differs",
        "detail": f"{changed} entries differ, the most {float(diff[index]):.3g} at {index}",
    }
