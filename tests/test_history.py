"""The package's docstrings and comments keep purpose and contract, not history.

Issue numbers, change numbers and dates belong to git and ``docs/changes.md``, a measurement's figures
to a page of ``docs/measurements/`` (linked by name): a docstring that says "issue 38" or "measured
2026-12-05" tells a newcomer nothing about what the code does, and goes stale as the code moves. The
test reads every module of ``crosscheck/`` and ``backends/`` (its docstrings, comments and strings).
"""

from __future__ import annotations

import re

import pytest
from paths import ROOT

PACKAGES = ("crosscheck", "backends")
#: What history looks like: an issue or change number (``issue 38``, ``change 26``, ``changes T4``,
#: ``issue #54``), or a date (``2026-12-05``).
HISTORY = re.compile(
    r"\bissues? #?\d+"
    r"|\bchanges? #?[A-Z]?\d+\b"
    r"|\b(?:19|20)\d\d-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12]\d|3[01])\b",
    re.IGNORECASE | re.MULTILINE,
)


def history(text: str) -> list[str]:
    """Each piece of history in ``text``, as found."""
    return [m.group(0).strip() for m in HISTORY.finditer(text)]


@pytest.mark.parametrize(
    "text",
    [
        "a float64 copy of the model a side fewer (issue 38)",
        "(Issue #54: the port room)",
        "kept in float32 (change 26 of real-size.md)",
        "the JAX capture compiled once (changes T1, T2)",
        "measured (2026-12-05)",
    ],
    ids=["issue", "issue-hash", "change", "change-letter", "date"],
)
def test_history_is_found(text):
    assert history(text)


@pytest.mark.parametrize(
    "text",
    [
        "``name``, or ``name#2``, ``name#3``... when it is taken",
        "a change in behaviour, 38 losses, 2**24 entries",
        "``h.0 (output) #1`` for a second",
        "the changes made by the call are noted",
        "width 1024, rows 2026",
    ],
    ids=["unique-name", "numbers", "a-label", "changes", "a-year-alone"],
)
def test_purpose_and_contract_are_not_history(text):
    assert history(text) == []


def test_no_history_in_the_package():
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
                for piece in history(line):
                    found.append(f"{path.relative_to(ROOT).as_posix()}:{number}: {piece}")
    if found:
        message = f"{len(found)} issue or change numbers or dates in the package (history goes to git, "
        message += "docs/changes.md and docs/measurements/):\n"
        pytest.fail(message + "\n".join(found), pytrace=False)
