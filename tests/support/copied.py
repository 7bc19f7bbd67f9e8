"""A copy of the package with one more framework: its folder under ``backends/`` and its name on the
registry line, nothing else edited (``docs/explanations/architecture.md``, "Adding a framework"). The
tests of that claim run a child process in the copy (``run_child``)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from paths import ROOT

REGISTRY_LINE = 'FRAMEWORKS = ("jax", "torch")\n'


def copy_with(where: Path, name: str, folder: dict[str, str], beside: dict[str, str]) -> None:
    """The package and its adapters copied to ``where``, with the framework ``name``'s folder (file name ->
    source) and its registry line added; ``beside``: modules put next to the package (the toy framework
    itself). Skips where the tests run without a source checkout (no ``backends/`` beside them)."""
    if not (ROOT / "backends" / "__init__.py").is_file():
        pytest.skip("not a source checkout: no backends/ beside the tests")
    ignore = shutil.ignore_patterns("__pycache__")
    shutil.copytree(ROOT / "crosscheck", where / "crosscheck", ignore=ignore)
    shutil.copytree(ROOT / "backends", where / "backends", ignore=ignore)
    registry = where / "crosscheck" / "_backends" / "__init__.py"
    source = registry.read_text(encoding="utf-8")
    assert source.count(REGISTRY_LINE) == 1, "the registry line moved: update REGISTRY_LINE"
    registry.write_text(source.replace(REGISTRY_LINE, REGISTRY_LINE.replace(")", f', "{name}")')), "utf-8")
    (where / "backends" / name).mkdir()
    for file, text in folder.items():
        (where / "backends" / name / file).write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")
    for file, text in beside.items():
        (where / file).write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")


def run_child(where: Path, code: str) -> Any:
    """Run ``code`` in a child process in the copy; what it printed last, as JSON."""
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=where,
        env={**os.environ, "PYTHONPATH": str(where)},
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])
