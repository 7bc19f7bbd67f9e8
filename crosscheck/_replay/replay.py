"""``crosscheck replay``: re-run a bundle's backends through the guarded call; bit for bit or not.

``replay`` builds the request (the bundle, what is trusted, how each backend runs) and ``execute`` runs
it: in this process (``rerun.py``), or, for a trusted workload given as an import string, in one worker
process, as a check of one is. Every backend the bundle records is a row, and only a row that came back
bit for bit counts as reproduced (``reproduced``): one not run (an untrusted import string, no spec),
one that failed or was skipped in the run (no value saved; re-run when it can be, to say what it does
now) fails the replay.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection
from typing import Any

from crosscheck._engine.execute import execute
from crosscheck._engine.records import Execution
from crosscheck._engine.request import Request
from crosscheck._engine.rerun import NO_SPEC, NOT_RUN, REPRODUCED

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
            valid (``replay_case.check_case``).
    """
    request = Request(
        workload=bundle["workload"],
        execution=Execution(isolate=isolate, timeout=timeout),
        bundle=bundle,
        trust=trust if isinstance(trust, bool) else tuple(trust),
    )
    rows: list[dict[str, Any]] = execute(request)
    return rows


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
