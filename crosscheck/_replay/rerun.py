"""The replay in this process: a row per backend of the bundle (``replay.py``, the verb, runs it here or
in its worker).

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

from collections.abc import Callable, Collection, Mapping
from typing import Any

import numpy as np

from crosscheck._backends import BUILTINS, ORACLE, Placement, placements
from crosscheck._engine.caller import Caller
from crosscheck._engine.load import load
from crosscheck._engine.process.isolate import Worker, foreign, load_isolated
from crosscheck._engine.quantity import quantity as _quantity
from crosscheck._errors import one_line
from crosscheck._records import Oracle, check_placement
from crosscheck._replay.case import check_case
from crosscheck._report.bundle import bitwise
from crosscheck._workloads.protocol import Options, Point
from crosscheck._workloads.registry import WORKLOADS, load_workload

#: The status of a backend (or workload) whose import string was not run.
NOT_RUN = "not run"
#: The status of a backend whose value came back bit for bit: the only one that counts as reproduced.
REPRODUCED = "bit for bit"
#: The status of a backend the bundle names no spec for.
NO_SPEC = "not replayable"
Rerun = Callable[[str | None, Any, Any], dict[str, Any]]


def rerun(
    bundle: dict[str, Any], trust: bool | Collection[str], timeout: float | None, isolate: bool | str
) -> list[dict[str, Any]]:
    """A row per backend of the bundle (``replay.replay`` says what each holds), in this process."""
    records = bundle["meta"]["report"]["backends"]
    saved = bundle["gradients"]
    again = _replayer(bundle, trust, timeout, isolate)
    rows = []
    for name in [*saved, *(name for name in records if name not in saved)]:
        record, value = records.get(name), saved.get(name)
        spec = _spec(record)
        now = again(spec, record, value)
        rows.append({"backend": name, "spec": spec, **_against_original(record, value, now)})
    return rows


def _replayer(
    bundle: dict[str, Any], trust: bool | Collection[str], timeout: float | None, isolate: bool | str
) -> Rerun:
    """What re-runs one backend (``rerun(spec, record, saved value)``, a row's status and detail); when
    the workload cannot run, one that says why for every backend."""
    if not trusted(bundle["workload"], trust, workload=True):
        detail = f"its workload `{one_line(bundle['workload'])}` is an import string, which is code"
        return lambda *_: {"status": NOT_RUN, "detail": detail, "untrusted": "workload"}
    try:
        workload = load_workload(bundle["workload"])
    except (ValueError, TypeError) as exc:
        why = f"not replayable: workload `{bundle['workload']}` cannot be loaded again: {exc}"
        return lambda *_: {"status": one_line(why), "detail": ""}
    check_case(workload, bundle)
    placement = recorded_placement(bundle["meta"]["report"])
    try:
        judge, call = _setup(workload, bundle, timeout, placement)
    except (ValueError, TypeError, KeyError, IndexError) as exc:
        why = f"not replayable: its arrays cannot be judged as workload `{bundle['workload']}`'s: {exc}"
        return lambda *_: {"status": one_line(why), "detail": ""}
    names = _builtin_names(workload)

    def run_again(spec: str | None, record: Any, value: Any) -> dict[str, Any]:
        if spec is None:
            detail = "the bundle names no backend to load for it (an object passed in Python cannot be)"
            return {"status": NO_SPEC, "detail": detail}
        if not trusted(spec, trust, workload=False, names=names):
            return {"status": NOT_RUN, "detail": "an import string is code", "untrusted": "backend"}
        reference = (record or {}).get("role") == "reference"
        isolated = foreign(spec) if isolate == "auto" else bool(isolate) and spec != ORACLE
        worker = Worker(bundle["workload"], spec, call.placement) if isolated else None
        return _rerun(workload, judge, call, (spec, worker), reference, value)

    return run_again


def halted(bundle: dict[str, Any], why: str) -> list[dict[str, Any]]:
    """The rows of a replay whose worker stopped before it sent them: every backend failed, ``why``."""
    records = bundle["meta"]["report"]["backends"]
    names = [*bundle["gradients"], *(name for name in records if name not in bundle["gradients"])]
    return [
        {"backend": name, "spec": _spec(records.get(name)), "status": why, "detail": ""} for name in names
    ]


def _against_original(record: Any, value: Any, now: dict[str, Any]) -> dict[str, Any]:
    """A row's status and detail: what the replay found (``now``), unless the backend was not ok in the
    run (failed, skipped, or no value saved): then that, with what it did then and now."""
    before = _original(record, value)
    if before is None:
        return {"detail": "", **now}
    status, then = before
    said = now["status"] + (f" ({now['detail']})" if now.get("detail") else "")
    error = one_line(str((record or {}).get("error")))
    if now["status"] == f"failed: {error}":
        said = "failed the same way"
    return {**now, "status": status, "detail": f"{then}; now: {said}"}


def _original(record: Any, value: Any) -> tuple[str, str] | None:
    """``(status, what it did)`` of a backend that was not ok in the run; None when it was and its value
    is saved."""
    status = one_line(str((record or {}).get("status", "ok")))[:40]
    error = (record or {}).get("error")
    then = f"originally: {one_line(str(error))[:300] if error else status}"
    if status == "ok" and value is not None:
        return None
    if status == "failed":
        return "failed originally", then
    if value is None:
        if status == "skipped":
            return "skipped originally", then
        return "no value saved", f"the bundle holds no value for it ({then})"
    return "not ok originally", f"originally: {status}"


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


def _setup(
    workload: Any, bundle: dict[str, Any], timeout: float | None, placement: tuple[Placement, ...]
) -> tuple[Any, Caller]:
    """The workload's judge at the bundle's arrays (private copies) and the guarded call on them, with
    the run's recorded ``placement``.

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
    options = Options(oracle=Oracle("full"), seed=seed if isinstance(seed, int) else 0)
    judge = workload.judge(_quantity(report.get("quantity", "grad")), point, options)
    return judge, Caller(point.arrays(), timeout=timeout, placement=placement)


def recorded_placement(report: Mapping[str, Any]) -> tuple[Placement, ...]:
    """The run's placement as it recorded it (its JSON report's settings of each framework,
    ``"jax_settings"``), applied again to each call; a framework whose settings a bundle does not record
    (written before they were): its defaults.

    Raises:
        ValueError: a value no run records (the bundle was edited).
    """
    options: dict[str, Any] = {}
    for record in placements():
        given = {k: v for k, v in (report.get(record.key) or {}).items() if k in record.options()}
        try:
            check_placement(given)
        except ValueError as exc:
            raise ValueError(f"the bundle's `report.{record.key}` are not a run's: {exc}") from exc
        options.update(given)
    return placements(options)


def _rerun(
    workload: Any,
    judge: Any,
    call: Caller,
    where: tuple[str, Worker | None],
    reference: bool,
    saved: Mapping[str, np.ndarray] | None,
) -> dict[str, Any]:
    """Load the backend again (in ``worker`` when given), call it as the run did, compare with ``saved``."""
    spec, worker = where
    try:
        if worker is not None:
            backend, result = load_isolated(worker, required=True)
        else:
            backend, result = load(workload, spec, required=True, placement=call.placement)
    except (ValueError, TypeError) as exc:
        return {"status": one_line(f"not replayable: {exc}")}
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


def same_values(saved: Mapping[str, np.ndarray] | None, value: Any) -> dict[str, Any]:
    """``{"status": "bit for bit"}`` when every parameter came back bit for bit with its saved value
    (and every parameter it returned has one), else the first that did not, in ``detail``; ``ran``
    when nothing was saved to compare with."""
    if saved is None:
        return {"status": "ran", "detail": "nothing saved to compare with"}
    if not isinstance(value, dict):
        return {"status": "differs", "detail": f"it returned {type(value).__name__}, not arrays by parameter"}
    unsaved = [key for key in value if key not in saved]
    if unsaved:
        return {"status": "differs", "detail": f"`{one_line(str(unsaved[0]))[:40]}` has no saved value"}
    for key, array in saved.items():
        if value.get(key) is None:
            return {"status": "differs", "detail": f"`{key}` is missing from what it returned"}
        found = bitwise(array, np.asarray(value[key]))
        if found["status"] != "bit for bit":
            return {"status": "differs", "detail": f"`{key}`: {found['detail']}"}
    return {"status": REPRODUCED}
