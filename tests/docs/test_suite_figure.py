"""The suite's size as ``docs/measurements/suite.md`` states it: "about N tests", within ``MARGIN``.

The count is the number of tests pytest collects from ``tests/``. A run that collected the whole suite
(every test file, nothing deselected, no module skipped) has it already (``support/collected.py``, kept
by ``conftest.py``: free); any other run collects the suite again in a subprocess (``pytest
--collect-only -q``: about 11 CPU seconds, 22 s of wall time at load 9 on the CI machine). Where a
module is skipped at collection (a framework not installed), the count is not the suite's, and the test
says so as a skip, never as a pass.
"""

from __future__ import annotations

import re
import subprocess
import sys

import collected
import pytest
from paths import ROOT

PAGE = ROOT / "docs" / "measurements" / "suite.md"
#: How far the count may drift from the page's figure before the page must say it anew (it says "about").
MARGIN = 0.05
FIGURE = re.compile(r"holds about ([\d,]+) tests")


def said() -> int:
    """The figure the page states."""
    found = FIGURE.findall(PAGE.read_text(encoding="utf-8"))
    assert len(found) == 1, (
        f"{PAGE.name} must say once how many tests the suite holds ('holds about N tests')"
    )
    return int(found[0].replace(",", ""))


def collected_again() -> tuple[int, int]:
    """``(tests, modules skipped)`` of the whole suite, collected in a subprocess."""
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "tests"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    tail = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else result.stderr
    tests = re.search(r"(\d+) tests? collected", tail)
    assert result.returncode == 0 and tests, f"the suite could not be collected: {tail}"
    skipped = re.search(r"(\d+) skipped", tail)
    return int(tests.group(1)), int(skipped.group(1)) if skipped else 0


def whole(run: dict) -> bool:
    """Whether ``run`` (``collected.RUN``) collected the whole suite: a test of every test file, none
    deselected, no module skipped."""
    files = {p.resolve() for p in (ROOT / "tests").rglob("test_*.py")}
    return (
        run.get("tests") is not None
        and not run["deselected"]
        and not run["skipped"]
        and files <= run["files"]
    )


def count() -> tuple[int, int]:
    """``(tests, modules skipped)``: this run's own collection where it was the whole suite, else anew."""
    if whole(collected.RUN):
        return collected.RUN["tests"], 0
    return collected_again()


def test_the_suite_page_says_how_many_tests_there_are():
    figure = said()
    tests, skipped = count()
    if skipped:
        pytest.skip(f"{skipped} test module(s) skipped at collection: {tests} is not the suite's count")
    assert abs(tests - figure) <= MARGIN * figure, (
        f"{PAGE.name} says the suite holds about {figure:,} tests; it holds {tests:,}: "
        f"write about {round(tests, -1):,}"
    )


def test_the_figure_is_read_from_the_page(tmp_path, monkeypatch):
    page = tmp_path / "suite.md"
    page.write_text("The suite holds about 1,234 tests (a note).\n", encoding="utf-8")
    monkeypatch.setitem(globals(), "PAGE", page)
    assert said() == 1234
    page.write_text("No figure here.\n", encoding="utf-8")
    with pytest.raises(AssertionError, match="must say once"):
        said()


def test_only_a_whole_collection_is_taken_as_the_count(tmp_path):
    every = {p.resolve() for p in (ROOT / "tests").rglob("test_*.py")}
    run = {"tests": 10, "files": every, "deselected": 0, "skipped": 0}
    assert whole(run)
    assert not whole({**run, "deselected": 1})  # -k
    assert not whole({**run, "skipped": 1})  # a framework missing
    assert not whole({**run, "files": every - {next(iter(every))}})  # a file or folder given
    assert not whole({**run, "tests": None})  # collection did not end
