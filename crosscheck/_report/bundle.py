"""Repro bundles: one ``.npz`` with the inputs, every backend's gradient, the case and the environment.

Loaded without pickle: arrays, plus the metadata as a JSON string in a 0-d unicode array.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from crosscheck._report.report import Report

MARKER = "crosscheck-bundle"
VERSION = 1


def save_bundle(report: Report, path: str | Path) -> None:
    """Write ``report``'s inputs, gradients and JSON report to ``path`` (``.npz``)."""
    params, inputs = report.inputs
    weights, x = params["weights"], inputs["x"]
    names = list(report.gradients)
    meta = {"format": MARKER, "version": VERSION, "gradients": names, "report": report.to_dict()}
    arrays = {f"gradient_{i}": np.asarray(report.gradients[name]["weights"]) for i, name in enumerate(names)}
    with open(path, "wb") as file:  # np.savez would append ".npz" to a path without it
        np.savez_compressed(file, weights=weights, x=x, meta=np.array(json.dumps(meta)), **arrays)


def load_bundle(path: str | Path) -> dict[str, Any]:
    """Read a bundle: ``{"weights", "x", "gradients": {name: array}, "meta"}``.

    Raises:
        ValueError: a missing, corrupt or foreign file (one line: what was expected, what was found).
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
            if meta.get("format") != MARKER:
                raise ValueError(f"{path} is not a crosscheck bundle (format {meta.get('format')!r}).")
            gradients = {name: data[f"gradient_{i}"] for i, name in enumerate(meta["gradients"])}
            return {"weights": data["weights"], "x": data["x"], "gradients": gradients, "meta": meta}
    except (OSError, EOFError, zipfile.BadZipFile, KeyError, json.JSONDecodeError, AttributeError) as exc:
        raise ValueError(
            f"{path} is not a readable crosscheck bundle ({type(exc).__name__}: {exc})."
        ) from exc
    except ValueError as exc:
        if "pickle" in str(exc).lower():
            raise ValueError(f"{path} holds pickled objects, which crosscheck never loads.") from exc
        raise


def bitwise(saved: np.ndarray, value: np.ndarray) -> dict[str, Any]:
    if value.shape != saved.shape or value.dtype != saved.dtype:
        return {
            "status": "differs",
            "detail": f"{value.dtype}{value.shape} vs saved {saved.dtype}{saved.shape}",
        }
    same = np.ascontiguousarray(saved).view(np.uint8) == np.ascontiguousarray(value).view(np.uint8)
    if np.all(same):
        return {"status": "bit for bit"}
    diff = np.abs(value.astype(np.float64) - saved.astype(np.float64))
    index = tuple(int(i) for i in np.unravel_index(int(np.nanargmax(diff)), diff.shape))
    changed = int(np.count_nonzero(value != saved))
    return {
        "status": "differs",
        "detail": f"{changed} entries differ, the most {float(diff[index]):.3g} at {index}",
    }
