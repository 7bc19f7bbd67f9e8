"""``crosscheck replay``: re-run a bundle's backends through the guarded call; bit for bit or not.

A bundle is a file someone sent, and its import strings are code: by default only the built-in
backends (and built-in workloads) are run again, and every import string is listed as not run;
``trust`` runs them (all, or those named). The bundle's workload is loaded again (``load_workload``,
with the name or import string the bundle records), its case record must make the bundle's arrays (a
bundle claiming one case over other arrays is refused), its judge is made at the bundle's arrays, and
each backend runs as the run ran it: a candidate through the judge's ``evaluate``, the reference
through its ``reference`` (the oracle estimates again, every entry). An import string runs in its own
worker process (``isolate``), as in ``crosscheck run``. Each value is compared with the saved one,
parameter by parameter.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

import numpy as np

from crosscheck._backends import BUILTINS, ORACLE
from crosscheck._engine.driver import Caller
from crosscheck._engine.isolate import Worker, foreign, load_isolated
from crosscheck._engine.load import load
from crosscheck._engine.quantity import quantity as _quantity
from crosscheck._errors import one_line
from crosscheck._report.bundle import bitwise
from crosscheck._workloads.protocol import Options, Point
from crosscheck._workloads.registry import WORKLOADS, load_workload

#: The status of a backend (or workload) whose import string was not run.
NOT_RUN = "not run"


def replay(
    bundle: dict[str, Any],
    *,
    trust: bool | Collection[str] = False,
    timeout: float | None = None,
    isolate: bool | str = "auto",
) -> list[dict[str, Any]]:
    """Re-run every backend of the bundle that can be loaded again and is trusted; say whether each
    reproduces bit for bit.

    Args:
        trust: ``True`` runs every import string the bundle names (its workload's too); a collection
            runs those it names; ``False`` only the built-ins.
        timeout: seconds each backend call may take (None: no limit).
        isolate: which backends run in a worker process, as for ``crosscheck.run`` (``"auto"``: import
            strings and plugins; ``True``: every one but the oracle; ``False``: none).

    Returns:
        One row per saved backend: ``backend``, ``spec`` (None: an object, which cannot be loaded
        again), ``status`` (``bit for bit``, ``differs``, ``failed: ...``, ``not replayable ...``,
        ``not run``) and a ``detail``.

    Raises:
        ValueError: the bundle's case record does not make its arrays.
    """
    saved_backends = bundle["meta"]["report"]["backends"]
    specs = {name: _spec(saved_backends.get(name)) for name in bundle["gradients"]}
    if not trusted(bundle["workload"], trust, workload=True):
        detail = f"its workload `{one_line(bundle['workload'])}` is an import string, which is code"
        return [{"backend": n, "spec": s, "status": NOT_RUN, "detail": detail} for n, s in specs.items()]
    try:
        workload = load_workload(bundle["workload"])
    except (ValueError, TypeError) as exc:
        why = f"not replayable: workload `{bundle['workload']}` cannot be loaded again: {exc}"
        return [{"backend": name, "spec": spec, "status": why} for name, spec in specs.items()]
    check_case(workload, bundle)
    try:
        judge, call = _setup(workload, bundle, timeout)
    except (ValueError, TypeError, KeyError, IndexError) as exc:
        why = f"not replayable: its arrays cannot be judged as workload `{bundle['workload']}`'s: {exc}"
        return [{"backend": name, "spec": spec, "status": one_line(why)} for name, spec in specs.items()]
    rows = []
    for name, saved in bundle["gradients"].items():
        row = {"backend": name, "spec": specs[name]}
        spec = specs[name]
        if spec is None:
            rows.append({**row, "status": "not replayable (an object, not a name or import string)"})
        elif not trusted(spec, trust, workload=False, names=_builtin_names(workload)):
            rows.append({**row, "status": NOT_RUN, "detail": "an import string is code"})
        else:
            reference = (saved_backends.get(name) or {}).get("role") == "reference"
            isolated = foreign(spec) if isolate == "auto" else bool(isolate) and spec != ORACLE
            worker = Worker(bundle["workload"], spec) if isolated else None
            rows.append({**row, **_rerun(workload, judge, call, (spec, worker), reference, saved)})
    return rows


def _spec(record: Any) -> str | None:
    """The spec a saved backend record names (None: an object, or no record)."""
    return ((record or {}).get("notes") or {}).get("spec")


def trusted(spec: str, trust: bool | Collection[str], *, workload: bool, names: Collection[str] = ()) -> bool:
    """Whether ``spec`` may run: a built-in (a backend, ``names``, or a built-in workload), or trusted."""
    builtin = spec in WORKLOADS if workload else (spec in BUILTINS or spec in names)
    if builtin or trust is True:
        return True
    return trust is not False and spec in trust


def _builtin_names(workload: Any) -> set[str]:
    """A workload's own implementations (crosscheck differentiates them) and the oracle."""
    inner = getattr(workload, "workload", None)
    return {ORACLE, *getattr(inner, "implementations", {})}


def _setup(workload: Any, bundle: dict[str, Any], timeout: float | None) -> tuple[Any, Caller]:
    """The workload's judge at the bundle's arrays (private copies) and the guarded call on them.

    Raises:
        ValueError, TypeError, KeyError, IndexError: the arrays cannot be judged as the workload's.
    """
    params = {k: np.array(v) for k, v in bundle["params"].items()}
    inputs = {k: np.array(v) for k, v in bundle["inputs"].items()}
    report = bundle["meta"]["report"]
    case = dict(report.get("case", {}))
    dtype = next(iter(params.values())).dtype.name
    point = Point(params, inputs, case, dtype)
    # Every entry: a reference saved in full is re-estimated in full (screening saves no value).
    seed = case.get("seed", 0)
    options = Options(seed=seed if isinstance(seed, int) else 0, oracle_mode="full")
    judge = workload.judge(_quantity(report.get("quantity", "grad")), point, options)
    return judge, Caller(point.arrays(), timeout=timeout)


def check_case(workload: Any, bundle: dict[str, Any]) -> None:
    """The bundle's case record must make its arrays, bit for bit (your own arrays: their SHA-256,
    checked when the bundle was loaded).

    Raises:
        ValueError: it does not (the file was changed, or its record was).
    """
    case = bundle["meta"]["report"]["case"]
    if case.get("source") == "user arrays":
        return
    # What the workload takes (the stack's knobs) and the case's dtype and seed, in the record's order.
    keys = (workload.takes - {"weights", "x"}) | {"dtype", "seed"}
    given = {k: v for k, v in case.items() if k in keys}
    shown = ", ".join(f"{k}={one_line(str(v))[:40]}" for k, v in given.items())
    try:
        known = {k: v for k, v in given.items() if v is not None}  # a null is the default
        knobs = {k: v for k, v in known.items() if k in workload.takes}
        point = workload.configure(**knobs).point(
            dtype=known.get("dtype", "float32"), seed=known.get("seed", 0)
        )
    except (ValueError, TypeError) as exc:
        raise ValueError(f"the bundle's case record ({shown}) is not a case: {exc}") from exc
    made = {**point.params, **point.inputs}
    for name, array in {**bundle["params"], **bundle["inputs"]}.items():
        differs = _differs(made.get(name), array)
        if differs:
            raise ValueError(
                f"the bundle's case record ({shown}) does not make its `{one_line(name)[:40]}` array "
                f"({differs}): the file was changed after it was written."
            )


def _differs(made: np.ndarray | None, held: np.ndarray) -> str:
    """How the array a case makes differs from the one a bundle holds ("" when bit for bit)."""
    if made is None:
        return "the case makes no such array"
    if made.shape != held.shape or made.dtype != held.dtype:
        return f"the case makes {made.dtype.name}{made.shape}, the bundle holds {held.dtype.name}{held.shape}"
    found = bitwise(made, held)
    return "" if found["status"] == "bit for bit" else found["detail"]


def _rerun(
    workload: Any,
    judge: Any,
    call: Caller,
    where: tuple[str, Worker | None],
    reference: bool,
    saved: dict[str, np.ndarray],
) -> dict[str, Any]:
    spec, worker = where
    try:
        if worker is not None:
            backend, result = load_isolated(worker, required=True)
        else:
            backend, result = load(workload, spec, required=True)
    except (ValueError, TypeError) as exc:
        return {"status": f"not replayable: {exc}"}
    try:
        if backend is None:
            return {"status": f"{result.status}: {result.error}"}
        out = judge.reference(backend, call) if reference else judge.evaluate(backend, call)
    finally:
        if worker is not None:
            worker.close()
    if out.error is not None:
        return {"status": f"failed: {out.error}"}
    value = out.value.value if reference else out.value
    return same_values(saved, value)


def same_values(saved: Mapping[str, np.ndarray], value: Any) -> dict[str, Any]:
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
