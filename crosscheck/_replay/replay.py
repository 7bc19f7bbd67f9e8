"""The verb: ``replay(bundle, ...)`` builds its small record (``Replay``: the bundle, what is trusted, how
each backend runs) and ``run_replay`` runs it, here (``rerun``) or, for a trusted workload given as an
import string, in one worker process, as a check of one is. Every backend the bundle records is a row,
and only a row that came back bit for bit counts as reproduced (``reproduced``): one not run (an
untrusted import string, no spec), one that failed or was skipped in the run (no value saved; re-run
when it can be, to say what it does now) fails the replay.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Collection
from typing import Any

from crosscheck._engine.process import contain
from crosscheck._errors import one_line
from crosscheck._records import check_isolation
from crosscheck._replay.rerun import NO_SPEC, NOT_RUN, REPRODUCED, halted, rerun, trusted

#: What a contained replay's worker runs: ``job``, below.
JOB = "crosscheck._replay.replay:job"

#: What the verdict calls each status that is not ``REPRODUCED`` (by its start), in this order.
_KINDS = (
    ("differs", "differ"),
    ("failed originally", "failed originally"),
    ("skipped originally", "skipped originally"),
    ("not ok originally", "were not ok originally"),
    ("no value saved", "have no value saved"),
    (NOT_RUN, "not run (import strings are code)"),
    (NO_SPEC, "not replayable"),
    ("failed", "failed in the replay"),
)


@dataclasses.dataclass(frozen=True)
class Replay:
    """One replay: the ``bundle`` (as ``load_bundle`` reads it), what is ``trust``ed, and how each backend
    runs (``isolate``, ``timeout``: as ``replay``'s arguments say), each checked when it is made.

    Raises:
        TypeError, ValueError: ``isolate`` or ``timeout`` of the wrong kind (the message names it).
    """

    bundle: dict[str, Any]
    trust: bool | tuple[str, ...] = False
    timeout: float | None = None
    isolate: bool | str = "auto"

    def __post_init__(self) -> None:
        check_isolation(self.isolate, self.timeout)
        if self.timeout is not None:
            object.__setattr__(self, "timeout", float(self.timeout))
        if not isinstance(self.trust, bool):
            object.__setattr__(self, "trust", tuple(self.trust))

    def to_data(self) -> dict[str, Any]:
        """The replay as plain data (arrays allowed, never copied) for its worker process."""
        trust = self.trust if isinstance(self.trust, bool) else list(self.trust)
        return {"bundle": self.bundle, "trust": trust, "timeout": self.timeout, "isolate": self.isolate}


def replay(
    bundle: dict[str, Any],
    *,
    trust: bool | Collection[str] = False,
    timeout: float | None = None,
    isolate: bool | str = "auto",
) -> list[dict[str, Any]]:
    """Re-run every backend of the bundle that can be loaded again and is trusted; say whether each
    reproduces bit for bit. Every backend the bundle records is a row: those with a saved value, and
    those the run recorded without one (it failed, or was skipped).

    Args:
        trust: ``True`` runs every import string the bundle names (its workload's too); a collection
            runs those it names; ``False`` only the built-ins.
        timeout: seconds each backend call may take (None: no limit).
        isolate: which backends run in a worker process, as for ``crosscheck.run`` (``"auto"``: import
            strings and plugins; ``True``: every one but the oracle; ``False``: none).

    Returns:
        One row per backend of the bundle: ``backend``, ``spec`` (None: an object, which cannot be
        loaded again), ``status`` (``bit for bit``, ``differs``, ``failed: ...``, ``failed
        originally``, ``skipped originally``, ``no value saved``, ``not replayable ...``, ``not run``),
        a ``detail`` (for a backend that was not ok originally: what it did then, and what it did now),
        and ``untrusted`` (``"backend"`` or ``"workload"``) when an import string was not run. Only
        ``bit for bit`` is reproduced (``reproduced(rows)``).

    Raises:
        ValueError: the bundle's case record does not make its arrays, or its user arrays are not
            valid (``case.check_case``).
    """
    return run_replay(Replay(bundle, trust if isinstance(trust, bool) else tuple(trust), timeout, isolate))


def run_replay(record: Replay) -> list[dict[str, Any]]:
    """The rows of ``record``'s replay: in a worker when its workload is a trusted import string (a
    worker that died or hung fails every backend's row, naming the workload), else here."""
    bundle = record.bundle
    spec = bundle["workload"]
    if contain.wanted(spec, record.isolate) and trusted(spec, record.trust, workload=True):

        def stopped(why: contain.WorkerStopped) -> list[dict[str, Any]]:
            return halted(bundle, one_line(f"failed: workload `{spec}`: {why} while {why.doing}"))

        rows: list[dict[str, Any]] = contain.in_worker(
            JOB, record.to_data(), stopped=stopped, timeout=record.timeout
        )
        return rows
    return rerun(bundle, record.trust, record.timeout, record.isolate)


def job(data: dict[str, Any], *, progress: Any, announce: Any) -> list[dict[str, Any]]:
    """In a contained replay's worker: the record rebuilt, and the replay run here (the worker is its
    process)."""
    record = Replay(**data)
    return rerun(record.bundle, record.trust, record.timeout, record.isolate)


def reproduced(rows: list[dict[str, Any]]) -> bool:
    """Whether a replay reproduced its bundle: some backend, and every one bit for bit."""
    return bool(rows) and all(row["status"] == REPRODUCED for row in rows)


def verdict(rows: list[dict[str, Any]]) -> str:
    """One line: ``REPRODUCED bit for bit: ...``, or ``NOT REPRODUCED: `` and how many backends did not,
    by kind (plain text: counts and fixed words only)."""
    if reproduced(rows):
        return f"REPRODUCED bit for bit: all {len(rows)} backends of the bundle"
    if not rows:
        return "NOT REPRODUCED: the bundle records no backend"
    kinds = Counter(_kind(row["status"]) for row in rows if row["status"] != REPRODUCED)
    return "NOT REPRODUCED: " + "; ".join(f"{n} of {len(rows)} backends {kind}" for kind, n in kinds.items())


def _kind(status: str) -> str:
    return next((label for start, label in _KINDS if status.startswith(start)), "did not reproduce")
