"""The worker process of ``--isolate`` (``crosscheck._engine.process.isolate``), and the messages both
sides send.

A worker is started as ``python -c BOOT FD SYS_PATH``: it loads one backend from its spec (with the
workload's spec), says what it has, then serves calls until told to close or until its parent goes (on
Linux it is killed with its parent). Each call is guarded as in process (``guarded``) and the result
converted to arrays here, so what crosses back is data.

Nothing crosses as a pickle: a message is a JSON header (each array's dtype, numbers only, and shape)
and each array's bytes, received into an array made for it (``send``, ``receive``).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from crosscheck._backends import BackendBroken, BackendUnavailable, placements
from crosscheck._compare.constants import STORAGE_ROUNDOFF
from crosscheck._compare.dtypes import aligned_empty, numpy_dtype
from crosscheck._engine.call import guarded, placed, unique, walk_arrays
from crosscheck._engine.quantity import QUANTITIES
from crosscheck._engine.returned import to_array, to_arrays
from crosscheck._errors import describe, one_line
from crosscheck._types import Parsed

if TYPE_CHECKING:
    from multiprocessing.connection import Connection

#: Backend methods a worker serves: each quantity's (``QUANTITIES``), ``activations`` (localization),
#: ``loss`` (a workload implementation's own loss, which the model oracle differences), the oracle's
#: evaluations along a line (``oracle.line.METHODS``: the point and directions held in the worker, only
#: numbers sent each evaluation) and ``release_evaluations`` (what drops the arrays its last losses
#: hold, called after them), ``program`` and ``modelled`` (a candidate's traced program and its device
#: model, for a classification: ``classnotes``); and the optional contexts (classification re-runs) it
#: enters.
METHODS = (
    *(q.method for q in QUANTITIES.values() if q.method),
    "activations",
    "program",
    "modelled",
    "loss",
    "hold_point",
    "hold_direction",
    "loss_along",
    "release_evaluations",
)
#: Methods whose result is plain data (JSON), sent as it is, not converted to arrays.
PLAIN = ("program",)
CONTEXTS = ("highest_precision", "without_checkpointing")
#: How the parent starts a worker: ``sys.argv`` is the connection's file descriptor and ``sys.path``.
BOOT = (
    "import json, sys; sys.path[:] = json.loads(sys.argv[2]); "
    "from crosscheck._engine.process.isolate_worker import main; main(int(sys.argv[1]))"
)


# -- messages: JSON and .npy, never pickle --------------------------------------------------------------


def _header(message: Any) -> tuple[bytes, list[np.ndarray]]:
    """``message``'s JSON with each array replaced by its place (its number, the dtype it is sent as,
    its shape), and the arrays in that order."""
    arrays: list[np.ndarray] = []

    def strip(value: object) -> object:
        if isinstance(value, np.ndarray):
            arrays.append(value)
            place: dict[str, Any] = {
                "__array__": len(arrays) - 1,
                "sent": _sendable(value).str,
                "shape": list(value.shape),
            }
            if value.dtype.name in STORAGE_ROUNDOFF:  # sent as its bytes, received as them: named
                place["dtype"] = value.dtype.name
            return place
        if isinstance(value, Mapping):
            return {"__dict__": [[str(k), strip(v)] for k, v in value.items()]}
        if isinstance(value, (list, tuple)):
            return [strip(v) for v in value]
        return value

    return json.dumps(strip(message), default=_jsonable).encode(), arrays


def _jsonable(value: Any) -> object:
    """What JSON cannot say as it is: a NumPy scalar as its Python value, anything else as text."""
    return value.item() if isinstance(value, np.generic) else one_line(str(value))


def _build(header: Parsed, arrays: list[np.ndarray]) -> Parsed:
    def build(value: Parsed) -> Parsed:
        if isinstance(value, dict) and "__array__" in value:
            array = arrays[value["__array__"]]
            dtype = value.get("dtype")
            return array.view(numpy_dtype(dtype)) if dtype in STORAGE_ROUNDOFF else array
        if isinstance(value, dict) and "__dict__" in value:
            return {k: build(v) for k, v in value["__dict__"]}
        if isinstance(value, list):
            return [build(v) for v in value]
        return value

    return build(header)


# A message is sent as parts: its JSON header, then each array's bytes as they are in memory,
# in pieces of at most ``PIECE`` bytes, each received into its place in an array made for them. A
# message made whole (``.npz`` in a growing buffer, its value, the header joined to it; the same read
# back) held about five copies of every array, a whole model's float64 gradient among them.

#: The most bytes of an array in one part of a message: what the receiving side holds beside the array.
PIECE = 1 << 23


def send(conn: Connection, message: object) -> None:
    """``message`` (JSON data with NumPy arrays anywhere inside) on ``conn``: its JSON header, then
    each array's bytes in parts of ``PIECE`` (a C-ordered array is not copied). An array of objects is
    refused (it would need pickle)."""
    header, arrays = _header(message)
    conn.send_bytes(header)
    for array in arrays:
        data = _bytes_of(np.ascontiguousarray(array))
        for start in range(0, data.size, PIECE):
            # An array is a buffer; NumPy's stubs say so from Python 3.12 only.
            conn.send_bytes(data[start : start + PIECE])  # type: ignore[arg-type]


def receive(conn: Connection) -> Parsed:
    """The message ``send`` sent on ``conn``: each array received into an array made for it, of the
    dtype and shape its header says (plain numbers only: never an object, never a pickle)."""
    header = json.loads(conn.recv_bytes())
    arrays: list[np.ndarray] = []
    for place in _places(header):
        dtype, shape = _dtype_of(place.get("sent")), place.get("shape")
        if not isinstance(shape, list) or not all(isinstance(n, int) and n >= 0 for n in shape):
            raise ValueError(f"a message's array shape must be a list of sizes, found {shape!r}")
        array = aligned_empty(shape, dtype)  # a JAX backend reads it in place (``dtypes.ALIGN``)
        data = _bytes_of(array)
        for start in range(0, data.size, PIECE):
            part = data[start : start + PIECE]
            if conn.recv_bytes_into(part) != part.size:  # a longer one raises BufferTooShort
                raise ValueError(f"a message's array of {array.nbytes} bytes came short")
        arrays.append(array)
    return _build(header, arrays)  # a storage dtype's bytes viewed as that dtype


def _places(value: Any) -> list[dict[str, Any]]:
    """Each array's place in a header, in the order of its arrays."""
    found: list[dict[str, Any]] = []

    def walk(value: Any) -> None:
        if isinstance(value, dict) and "__array__" in value:
            found.append(value)
        elif isinstance(value, dict):
            for v in value.values():
                walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)

    walk(value)
    found.sort(key=lambda place: place["__array__"])
    if [place["__array__"] for place in found] != list(range(len(found))):
        raise ValueError("a message's arrays are not numbered in order")
    return found


def _sendable(array: np.ndarray) -> np.dtype:
    """The dtype ``array`` is sent as: its own, a storage dtype's bytes (``STORAGE_ROUNDOFF``) as
    unsigned integers of its width; an array of objects is refused."""
    if array.dtype.name in STORAGE_ROUNDOFF:
        return np.dtype(f"u{array.dtype.itemsize}")
    if array.dtype.hasobject or array.dtype.kind not in "biufc":
        raise ValueError(f"an array of {array.dtype} cannot be sent: only numbers are (objects need pickle)")
    return array.dtype


def _dtype_of(name: Any) -> np.dtype:
    if not isinstance(name, str):
        raise ValueError(f"a message's array dtype must be a name, found {name!r}")
    try:
        dtype = np.dtype(name)
    except TypeError:
        raise ValueError(f"a message's array must hold numbers, found dtype {name!r}") from None
    if dtype.hasobject or dtype.kind not in "biufc":
        raise ValueError(f"a message's array must hold numbers, found dtype {name!r}")
    return dtype


def _bytes_of(array: np.ndarray) -> np.ndarray:
    """A C-ordered array's memory as bytes (a view: written through by ``recv_bytes_into``)."""
    return array.reshape(-1).view(np.uint8)


def _arrays_in(args: list[Any], kwargs: dict[str, Any], names: list[str]) -> dict[str, np.ndarray]:
    """The arrays of a call's arguments, by the names the parent gave them (``hand``'s order)."""
    found: dict[str, np.ndarray] = {}

    def keep(array: np.ndarray, name: str) -> np.ndarray:
        given = names[len(found)] if len(found) < len(names) else name
        found[unique(given, found)] = array
        return array

    walk_arrays(args, kwargs, keep)
    return found


# -- the worker ----------------------------------------------------------------------------------------


def main(fd: int) -> None:
    """Serve one backend on the connection ``fd`` until told to close (or the parent goes)."""
    from multiprocessing.connection import Connection

    _die_with_parent()
    # The parent decides what a Ctrl-C stops: it stops this process itself.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    conn = Connection(fd)
    backend, reply = _load(receive(conn))
    send(conn, reply)
    while backend is not None:
        try:
            request = receive(conn)
        except (EOFError, OSError):
            return
        if request["op"] != "call":
            return
        send(conn, _serve(backend, request))


def _die_with_parent() -> None:
    """Linux: be killed when the parent dies (a worker stuck in a backend must not outlive the run)."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(Exception):
            import ctypes

            ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
            if os.getppid() == 1:  # the parent went before the line above
                os._exit(1)


def _load(request: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    from crosscheck._engine.load import info_where, spec_name
    from crosscheck._workloads.registry import load_workload

    placement = placements(request.get("settings"))
    try:
        with placed(placement):
            backend = load_workload(request["workload"]).resolve(request["backend"])
    except BackendUnavailable as exc:
        return None, {"status": "unavailable", "error": one_line(str(exc))}
    except BackendBroken as exc:
        return None, {"status": "failed", "error": one_line(str(exc))}
    except (ValueError, TypeError) as exc:
        return None, {"status": "usage", "error": str(exc)}
    except BaseException as exc:  # its import or factory called sys.exit, ...
        return None, {"status": "failed", "error": f"failed to load: {describe(exc)}"}
    description = {
        "status": "loaded",
        "name": spec_name(backend),
        "info": info_where(backend, placement),
        "methods": [m for m in METHODS if _has(backend, m)],
        "contexts": [c for c in CONTEXTS if _has(backend, c)],
    }
    try:
        dtype = getattr(backend, "output_dtype", None)
        if dtype is not None:
            description["output_dtype"] = str(dtype)
    except BaseException as exc:
        description["output_dtype"] = {"error": describe(exc)}
    return backend, description


def _has(backend: Any, name: str) -> bool:
    try:
        return callable(getattr(backend, name, None))
    except BaseException:  # a property that raises: the method is not there
        return False


def _serve(backend: Any, request: dict[str, Any]) -> dict[str, Any]:
    """One call, guarded as in process; the value converted to arrays here (what crosses is data)."""
    args, kwargs = request["args"], request["kwargs"]
    inputs = _arrays_in(args, kwargs, request["names"])
    fn: Callable[..., Any] = getattr(backend, request["method"])

    def call() -> object:
        with contextlib.ExitStack() as stack:
            for context in request["contexts"]:
                stack.enter_context(getattr(backend, context)())
            return fn(*args, **kwargs)

    out = guarded(call, (), inputs=inputs, placement=placements(request.get("settings")))
    error, notes, seconds = out.error, dict(out.notes), out.seconds
    box, value = [out.value], None  # converted with no other reference held here
    del out
    if error is None and request["method"] in PLAIN:
        value = _data(box.pop())
    elif error is None:
        value, error, more = _plain(box)
        notes.update(more)
    return {"value": value, "error": error, "seconds": seconds, "notes": notes}


def _data(value: Any) -> Parsed:
    """A method's plain-data result (``PLAIN``) as JSON makes it: numbers, strings, lists and dicts with
    string keys (anything else, a string of it: the parent refuses what is not its data)."""
    return json.loads(json.dumps(value, default=str))


def _plain(box: list[Any]) -> tuple[Any, str | None, dict[str, str]]:
    """A backend's result (``box``'s one item, taken out of it) as arrays (a dict or a list of them kept
    as such), or why it is not; None crosses as None (the parent says what it expected instead, as in
    process). No reference to the result is kept here while it is converted: a result the backend no
    longer holds is freed a tensor at a time, not kept beside its copies until the last is made."""
    if box[0] is None:
        return None, None, {}
    if isinstance(box[0], Mapping):
        return to_arrays(box.pop())
    if isinstance(box[0], (list, tuple)):
        items, arrays = list(box.pop())[::-1], []
        while items:
            array, error, _ = to_array(items.pop())
            if error is not None:
                return None, error, {}
            arrays.append(array)
        return arrays, None, {}
    return to_array(box.pop())
