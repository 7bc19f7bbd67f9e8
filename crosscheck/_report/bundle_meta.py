"""The shape a bundle's metadata must have, checked before anything reads it.

A bundle is a file someone sent: its metadata can be anything JSON can say. ``check_meta`` refuses, in
one line, whatever is not what ``save_bundle`` writes (a missing or ``null`` report, lists where
objects belong, names that are not strings, ...), so that nothing after it can fail with a traceback.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from crosscheck._backends import placements
from crosscheck._errors import one_line


def check_meta(meta: dict[str, Any], path: Path) -> None:
    """Raise ``ValueError`` (one line, naming the key) unless ``meta`` is shaped like a bundle's of its
    ``version`` (1 or 2: ``load_bundle`` refuses any other before it asks)."""
    if meta.get("version") == 1:
        _need(meta, "gradients", _names, "a list of backend names", path)
    else:
        for key in ("parameters", "inputs"):
            _need(meta, key, _names, "a list of names", path)
        if not meta["parameters"]:
            raise _malformed(path, "`parameters` is empty")
        _need(meta, "values", _names_by_name, "an object: backend name -> a list of parameter names", path)
        if "workload" in meta:
            _need(meta, "workload", _text, "a workload's name or import string", path)
        if "sha256" in meta:
            _need(meta, "sha256", _texts_by_name, "an object: entry -> hex digest", path)
    _need(meta, "report", _object, "an object (the run's JSON report)", path)
    report = meta["report"]
    _need(report, "case", _object, "an object", path, prefix="report.")
    _need(
        report, "backends", _objects_by_name, "an object: backend name -> its record", path, prefix="report."
    )
    if "quantity" in report:
        _need(report, "quantity", _text, "a quantity's name", path, prefix="report.")
    for key in (record.key for record in placements() if record.key in report):  # "jax_settings"
        _need(report, key, _texts_by_name, "an object: setting -> its value", path, prefix="report.")
    for name, record in report["backends"].items():
        where = f"report.backends.{one_line(name)[:40]}."
        for key, ok, expected in (("notes", _object, "an object"), ("role", _text, "a string")):
            if record.get(key) is not None:
                _need(record, key, ok, expected, path, prefix=where)
        spec = (record.get("notes") or {}).get("spec")
        if spec is not None and not _text(spec):
            raise _malformed(path, f"`{where}notes.spec` must be a name or import string")


def _need(
    where: dict[str, Any], key: str, ok: Callable[[Any], bool], expected: str, path: Path, prefix: str = ""
) -> None:
    if key not in where:
        raise _malformed(path, f"`{prefix}{key}` is missing")
    if not ok(where[key]):
        raise _malformed(path, f"`{prefix}{key}` must be {expected}; found {_kind(where[key])}")


def _malformed(path: Path, what: str) -> ValueError:
    return ValueError(f"{path} is not a valid crosscheck bundle: its metadata's {what}.")


def _kind(value: Any) -> str:
    kinds: dict[type, str] = {dict: "an object", list: "a list", str: "a string"}
    return "null" if value is None else kinds.get(type(value), type(value).__name__)


def _text(value: Any) -> bool:
    return isinstance(value, str)


def _object(value: Any) -> bool:
    return isinstance(value, dict)


def _names(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _names_by_name(value: Any) -> bool:
    return isinstance(value, dict) and all(_names(v) for v in value.values())


def _texts_by_name(value: Any) -> bool:
    return isinstance(value, dict) and all(isinstance(v, str) for v in value.values())


def _objects_by_name(value: Any) -> bool:
    return isinstance(value, dict) and all(isinstance(v, dict) for v in value.values())
