"""The worker process of ``--isolate`` (``crosscheck._engine.isolate``), and the messages both sides send.

A worker is started as ``python -c BOOT FD SYS_PATH``: it loads one backend from its spec (with the
workload's spec), says what it has, then serves calls until told to close or until its parent goes (on
Linux it is killed with its parent). Each call is guarded as in process (``guarded``) and the result
converted to arrays here, so what crosses back is data.

Nothing crosses as a pickle: a message is a JSON header and the arrays as ``.npy`` data, read back
with ``allow_pickle=False``.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import sys
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from crosscheck._backends import BackendBroken, BackendUnavailable, backend_info
from crosscheck._compare.constants import STORAGE_ROUNDOFF
from crosscheck._compare.dtypes import numpy_dtype
from crosscheck._engine.call import guarded, to_array, to_arrays, unique, walk_arrays
from crosscheck._engine.quantity import QUANTITIES
from crosscheck._errors import describe, one_line

#: Backend methods a worker serves: each quantity's (``QUANTITIES``), ``activations`` (localization),
#: ``loss`` (a workload implementation's own loss, which the model oracle differences), the oracle's
#: evaluations along a line (``oracle.line.METHODS``: the point and directions held in the worker, only
#: numbers sent each evaluation) and ``release_evaluations`` (what drops the arrays its last losses
#: hold, called after them); and the optional contexts (classification re-runs) it enters.
METHODS = (
    *(q.method for q in QUANTITIES.values() if q.method),
    "activations",
    "loss",
    "hold_point",
    "hold_direction",
    "loss_along",
    "release_evaluations",
)
CONTEXTS = ("highest_precision", "without_checkpointing")
#: How the parent starts a worker: ``sys.argv`` is the connection's file descriptor and ``sys.path``.
BOOT = (
    "import json, sys; sys.path[:] = json.loads(sys.argv[2]); "
    "from crosscheck._engine.isolate_worker import main; main(int(sys.argv[1]))"
)


# -- messages: JSON and .npy, never pickle --------------------------------------------------------------


def encode(message: Any) -> bytes:
    """``message`` (JSON data with NumPy arrays anywhere inside) as bytes: a JSON header, then ``.npz``."""
    arrays: list[np.ndarray] = []

    def strip(value: Any) -> Any:
        if isinstance(value, np.ndarray):
            arrays.append(value)
            if value.dtype.name in STORAGE_ROUNDOFF:  # .npy says bfloat16 as raw bytes ("V2"): named
                return {"__array__": len(arrays) - 1, "dtype": value.dtype.name}
            return {"__array__": len(arrays) - 1}
        if isinstance(value, Mapping):
            return {"__dict__": [[str(k), strip(v)] for k, v in value.items()]}
        if isinstance(value, (list, tuple)):
            return [strip(v) for v in value]
        return value

    header = json.dumps(strip(message), default=_jsonable).encode()
    data = io.BytesIO()
    np.savez(data, *arrays, allow_pickle=False)  # an object array (none should get here) is refused
    return len(header).to_bytes(8, "little") + header + data.getvalue()


def _jsonable(value: Any) -> Any:
    """What JSON cannot say as it is: a NumPy scalar as its Python value, anything else as text."""
    return value.item() if isinstance(value, np.generic) else one_line(str(value))


def decode(payload: bytes) -> Any:
    """The message ``encode`` made (arrays loaded without pickle)."""
    size = int.from_bytes(payload[:8], "little")
    header = json.loads(payload[8 : 8 + size])
    with np.load(io.BytesIO(payload[8 + size :]), allow_pickle=False) as data:
        arrays = [data[f"arr_{i}"] for i in range(len(data.files))]

    def build(value: Any) -> Any:
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
    backend, reply = _load(decode(conn.recv_bytes()))
    conn.send_bytes(encode(reply))
    while backend is not None:
        try:
            request = decode(conn.recv_bytes())
        except (EOFError, OSError):
            return
        if request["op"] != "call":
            return
        conn.send_bytes(encode(_serve(backend, request)))


def _die_with_parent() -> None:
    """Linux: be killed when the parent dies (a worker stuck in a backend must not outlive the run)."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(Exception):
            import ctypes

            ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
            if os.getppid() == 1:  # the parent went before the line above
                os._exit(1)


def _load(request: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    from crosscheck._engine.load import spec_name
    from crosscheck._workloads.registry import load_workload

    try:
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
        "info": backend_info(backend),
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

    def call() -> Any:
        with contextlib.ExitStack() as stack:
            for context in request["contexts"]:
                stack.enter_context(getattr(backend, context)())
            return fn(*args, **kwargs)

    out = guarded(call, (), inputs=inputs)
    error, notes, seconds = out.error, dict(out.notes), out.seconds
    box, value = [out.value], None  # converted with no other reference held here (issue 38)
    del out
    if error is None:
        value, error, more = _plain(box)
        notes.update(more)
    return {"value": value, "error": error, "seconds": seconds, "notes": notes}


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
