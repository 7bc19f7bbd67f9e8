"""What this pytest run collected, kept by ``conftest.py``'s hooks: the number of tests, the files they
are in, and whether anything was left out (a test deselected, a module skipped at collection). The
suite page's figure is checked against it (``tests/docs/test_suite_figure.py``) where the run collected
the whole suite."""

from __future__ import annotations

from pathlib import Path

#: ``tests``: the tests collected; ``files``: their files; ``deselected``, ``skipped``: tests deselected
#: (``-k``, ``-m``) and modules skipped at collection. Empty until collection ends.
RUN: dict = {}


def started() -> None:
    """A run begins: nothing collected yet."""
    RUN.clear()
    RUN.update(tests=None, files=set(), deselected=0, skipped=0)


def finished(paths: list[Path]) -> None:
    """Collection ended with the tests at ``paths`` (one entry a test)."""
    RUN.update(tests=len(paths), files={Path(p).resolve() for p in paths})
