"""A report as data that crosses a process boundary (``to_wire``) and back (``from_wire``), never as a
pickle: a contained run's worker (``crosscheck._engine.process.contain``) runs code from elsewhere, so what it
sends back is data, and the parent builds the report from it.

``to_wire`` gives JSON data with NumPy arrays inside (the worker's framing sends those as ``.npy``, read
back without pickle). Only the records of a report are rebuilt (``RECORDS``: the report, its backends'
results and verdicts, its comparisons and their tolerances and kinks); a section is rebuilt from the
name of its render function, which must be a workload's of crosscheck's own (``SECTION_HOMES``).
Tuples stay tuples, mappings keep keys that are not text, NumPy scalars keep their dtype, an object
array of text stays one.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Hashable, Mapping
from typing import Any, TypeAlias

import numpy as np

from crosscheck._compare.record import Comparison, Kinks, Tolerance
from crosscheck._report.report import BackendResult, Report, Section, Verdict
from crosscheck._types import Parsed

#: What ``to_wire`` gives: JSON data with NumPy arrays inside (a tagged object, ``{"record": ...}``,
#: ``{"map": ...}``, ..., says what ``from_wire`` rebuilds of it).
Wire: TypeAlias = bool | int | float | str | np.ndarray | list["Wire"] | dict[str, "Wire"] | None

#: The records ``from_wire`` rebuilds, by name; nothing else is ever constructed from the data.
RECORDS: dict[str, type] = {
    cls.__name__: cls for cls in (Report, BackendResult, Verdict, Comparison, Tolerance, Kinks)
}


def to_wire(value: Any) -> Wire:
    """``value`` (a report, or plain data holding records) as JSON data with NumPy arrays inside.

    Raises:
        TypeError: something that is not data (the message names its type).
    """
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, Section):
        return {"section": [value.render.__module__, value.render.__qualname__, value.place]}
    if dataclasses.is_dataclass(value) and type(value).__name__ in RECORDS:
        fields = {f.name: to_wire(getattr(value, f.name)) for f in dataclasses.fields(value)}
        return {"record": type(value).__name__, "fields": fields}
    if isinstance(value, np.ndarray):
        if value.dtype == object:
            return {"objects": [to_wire(v) for v in value.ravel().tolist()], "shape": list(value.shape)}
        return value
    if isinstance(value, np.generic):
        return {"scalar": np.asarray(value)}
    if isinstance(value, Mapping):
        return {"map": [[to_wire(k), to_wire(v)] for k, v in value.items()]}
    if isinstance(value, tuple):
        return {"tuple": [to_wire(v) for v in value]}
    if isinstance(value, list):
        return [to_wire(v) for v in value]
    raise TypeError(f"a report cannot carry a {type(value).__name__} across processes")


def from_wire(data: Parsed) -> object:
    """The value ``to_wire`` gave ``data`` for.

    Raises:
        ValueError: data that no ``to_wire`` made (an unknown record, a section not crosscheck's).
    """
    if isinstance(data, list):
        return [from_wire(v) for v in data]
    if not isinstance(data, dict):
        return data
    if "map" in data:
        return {_key(from_wire(k)): from_wire(v) for k, v in data["map"]}
    if "tuple" in data:
        return tuple(from_wire(v) for v in data["tuple"])
    if "scalar" in data:
        return np.asarray(data["scalar"])[()]
    if "objects" in data:
        out = np.empty(len(data["objects"]), dtype=object)
        out[:] = [from_wire(v) for v in data["objects"]]
        return out.reshape(data["shape"])
    if "record" in data:
        cls = RECORDS.get(data["record"])
        if cls is None:
            raise ValueError(f"unknown record `{data['record']}` in a report from a worker process")
        return cls(**{name: from_wire(v) for name, v in data["fields"].items()})
    if "section" in data:
        return _section(*data["section"])
    raise ValueError(f"unknown data in a report from a worker process: keys {sorted(data)[:5]}")


def _key(key: Hashable | list[Any]) -> Hashable:
    """A mapping's key as it was (a list only where JSON made one of a tuple)."""
    return tuple(key) if isinstance(key, list) else key


#: Where a section's render function lives: a workload's module (only a workload hands a section over,
#: through its judge). The parent of a contained run imports it by name: a static import would reach up
#: from the reports' layer to the workloads'.
SECTION_HOMES = "crosscheck._workloads."


def _section(module: str, qualname: str, place: str) -> Section:
    """The section whose render function is ``module.qualname``, a workload's of crosscheck's own."""
    if not module.startswith(SECTION_HOMES) or "<" in qualname:
        raise ValueError(
            f"a section of a report must be crosscheck's own, a workload's, found `{module}:{qualname}`"
        )
    # Spelled out, so that the import-graph test sees what this may import (every workload module).
    render: Any = importlib.import_module(f"crosscheck._workloads.{module.removeprefix(SECTION_HOMES)}")
    for part in qualname.split("."):
        render = getattr(render, part)
    return Section(render, place)
