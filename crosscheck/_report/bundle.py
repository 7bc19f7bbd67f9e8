"""Repro bundles: one ``.npz`` with every parameter and input array, every backend's value per
parameter, the workload, the case and the environment.

Loaded without pickle: arrays, plus the metadata as a JSON string in a 0-d unicode array. Array names
are numbered (``param_0``, ``input_0``, ``value_1_0``: backend 1, parameter 0); the metadata lists the
names they stand for, so a parameter or backend may be called anything, and the SHA-256 of each array
(``"sha256"``: entry -> hex digest; bundles written before it have none, and load unchecked).

Version 2 holds any workload (the metadata's ``"workload"`` is what ``load_workload`` takes again);
version 1 bundles (the stack's ``weights``, ``x`` and ``gradient_<i>``) load as the stack's. Any other
version is refused: what it holds is not known here.
"""

from __future__ import annotations

import hashlib
import json
import zipfile
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from crosscheck._compare.constants import STORAGE_ROUNDOFF
from crosscheck._compare.dtypes import numpy_dtype
from crosscheck._errors import one_line
from crosscheck._files import check_readable, member_names, read_member
from crosscheck._report.bundle_meta import check_meta
from crosscheck._report.report import Report

MARKER = "crosscheck-bundle"
VERSION = 2
#: The format versions ``load_bundle`` reads; any other is refused (a newer crosscheck's bundle may mean
#: something these readers do not know, and a replay of it would claim what it cannot check).
VERSIONS = (1, VERSION)
#: The most bytes of metadata read (its JSON as a 0-d unicode array, 4 bytes a character; a bundle's
#: is a few KiB).
MAX_META = 16 * 2**20
#: What reading a damaged archive raises (made one line by ``load_bundle``); a malformed one's metadata
#: is refused by ``check_meta`` before anything reads it.
_UNREADABLE = (OSError, EOFError, zipfile.BadZipFile, zlib.error, json.JSONDecodeError)


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
    arrays: dict[str, Any] = {f"param_{i}": np.asarray(a) for i, a in enumerate(params.values())}
    arrays.update({f"input_{i}": np.asarray(a) for i, a in enumerate(inputs.values())})
    for b, value in enumerate(values.values()):
        arrays.update({f"value_{b}_{p}": np.asarray(a) for p, a in enumerate(value.values())})
    pickled = [key for key, a in arrays.items() if a.dtype.hasobject]
    if pickled:  # an object array would be stored as a pickle, which a bundle never holds
        raise ValueError(f"cannot bundle object arrays (they would be pickled): {', '.join(pickled)}")
    meta["sha256"] = {key: sha256(a) for key, a in arrays.items()}
    # .npy has no bfloat16: a 16-bit array is stored as its bits (uint16), its dtype named here.
    sixteen = {key: a.dtype.name for key, a in arrays.items() if a.dtype.name in STORAGE_ROUNDOFF}
    if sixteen:
        meta["dtypes"] = sixteen
        arrays.update({key: arrays[key].view(np.uint16) for key in sixteen})
    arrays["meta"] = np.array(json.dumps(meta))
    with open(path, "wb") as file:  # np.savez would append ".npz" to a path without it
        np.savez_compressed(file, **arrays)


def load_bundle(path: str | Path) -> dict[str, Any]:
    """Read a bundle: ``{"workload", "params", "inputs", "gradients": {backend: {parameter: array}},
    "meta"}`` (a version 1 bundle is the stack's: ``params`` ``{"weights"}``, ``inputs`` ``{"x"}``).

    A bundle is a file someone sent: its metadata is checked for the shape a bundle's has (any other
    is one line, never a traceback), each array's header before the array is read (its size against
    the file and this machine's memory), and each array's SHA-256 against the one the bundle records.

    Raises:
        ValueError: a missing, corrupt, malformed or foreign file, or arrays that are not the ones
            the bundle records (one line: what was expected, what was found).
    """
    if not Path(path).exists():
        raise ValueError(f"bundle not found: {path}")
    path = check_readable(path, "bundle")
    if not zipfile.is_zipfile(path):
        raise ValueError(f"{path} is not a crosscheck bundle: expected an .npz archive, found another file.")
    try:
        with zipfile.ZipFile(path) as archive:
            meta = _meta(archive, path)
            read = _reader(archive, path, meta)
            bundle = _version_1(read, meta) if meta.get("version") == 1 else _version_2(read, meta, path)
    except _UNREADABLE as exc:
        raise ValueError(
            f"{path} is not a readable crosscheck bundle ({type(exc).__name__}: {one_line(str(exc))})."
        ) from exc
    _check_hashes(bundle, path)
    return bundle


def _meta(archive: zipfile.ZipFile, path: Path) -> dict[str, Any]:
    """The bundle's metadata (a JSON string in the 0-d array ``meta``), checked for its shape."""
    if "meta" not in member_names(archive):
        raise ValueError(f"{path} is not a crosscheck bundle (no `meta` entry).")

    def text_only(shape: tuple[int, ...], dtype: np.dtype) -> None:
        if shape != () or dtype.kind != "U" or dtype.itemsize > MAX_META:
            raise ValueError(f"{path} is not a crosscheck bundle (its `meta` is not one JSON string).")

    raw = read_member(archive, "meta", what=f"bundle {path}, entry `meta`", expect=text_only)
    try:
        meta = json.loads(str(raw[()]))
    except RecursionError as exc:
        raise ValueError(f"{path}: its metadata is nested too deeply to be a crosscheck bundle's.") from exc
    if not isinstance(meta, dict) or meta.get("format") != MARKER:
        found = meta.get("format") if isinstance(meta, dict) else meta
        raise ValueError(f"{path} is not a crosscheck bundle (format {one_line(repr(found)):.60}).")
    version = meta.get("version")
    if type(version) is not int or version not in VERSIONS:  # True == 1, but is no version
        found = "none" if version is None else one_line(json.dumps(version))[:40]
        raise ValueError(
            f"{path} is a crosscheck bundle of format version {found}; this crosscheck reads versions "
            f"{' and '.join(map(str, VERSIONS))} (a bundle from a newer crosscheck, or an edited file)."
        )
    check_meta(meta, path)
    return meta


def _reader(archive: zipfile.ZipFile, path: Path, meta: dict[str, Any]) -> Callable[[str], np.ndarray]:
    """Read an entry of the archive: checked by its header first, then (``meta["sha256"]``) its hash."""
    hashes = meta.get("sha256")
    dtypes = meta.get("dtypes")
    sixteen: dict[str, Any] = dtypes if isinstance(dtypes, dict) else {}

    def numbers(shape: tuple[int, ...], dtype: np.dtype) -> None:
        if dtype.kind not in "fiub":
            raise ValueError(f"{path}: a bundle's arrays hold numbers; one holds {dtype.name}.")

    def read(entry: str) -> np.ndarray:
        array = read_member(archive, entry, what=f"bundle {path}, entry `{entry}`", expect=numbers)
        if hashes is not None:
            claimed = hashes.get(entry)
            if claimed is None:
                raise ValueError(f"{path}: its entry `{entry}` has no SHA-256 among the bundle's hashes.")
            if sha256(array) != claimed:
                raise ValueError(
                    f"{path}: its entry `{entry}` is not the array the bundle recorded (SHA-256 differs)."
                )
        dtype = sixteen.get(entry)
        if dtype is None:
            return array
        if dtype not in STORAGE_ROUNDOFF or array.dtype != np.uint16:
            raise ValueError(f"{path}: its entry `{entry}` claims dtype {one_line(str(dtype)):.20}.")
        return array.view(numpy_dtype(dtype))

    return read


def sha256(array: np.ndarray) -> str:
    """The SHA-256 of an array's bytes (C order)."""
    return hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()


def _version_1(read: Callable[[str], np.ndarray], meta: dict[str, Any]) -> dict[str, Any]:
    """The stack's version 1 bundle: ``weights``, ``x`` and ``gradient_<i>`` per name in ``gradients``."""
    gradients = {name: {"weights": read(f"gradient_{i}")} for i, name in enumerate(meta["gradients"])}
    params, inputs = {"weights": read("weights")}, {"x": read("x")}
    return {"workload": "stack", "params": params, "inputs": inputs, "gradients": gradients, "meta": meta}


def _version_2(read: Callable[[str], np.ndarray], meta: dict[str, Any], path: Path) -> dict[str, Any]:
    params = {k: read(f"param_{i}") for i, k in enumerate(meta["parameters"])}
    inputs = {k: read(f"input_{i}") for i, k in enumerate(meta["inputs"])}
    gradients = {
        name: {k: read(f"value_{b}_{p}") for p, k in enumerate(keys)}
        for b, (name, keys) in enumerate(meta["values"].items())
    }
    workload = meta.get("workload", "stack")
    return {"workload": workload, "params": params, "inputs": inputs, "gradients": gradients, "meta": meta}


def _check_hashes(bundle: dict[str, Any], path: Path) -> None:
    """Arrays whose SHA-256 the case records (your own arrays) must be those arrays."""
    case = bundle["meta"]["report"]["case"]
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
