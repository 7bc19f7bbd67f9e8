"""The tests that signal a real ``crosscheck`` process (Ctrl-C, SIGTERM): start it with the slow hostile
backend (``tests/support/hostile.py``), wait until that backend has started, and find its worker processes and
whether they still live (Linux: from ``/proc``)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from paths import SUPPORT


def start(command: list[str], cwd: Path, marker: Path) -> subprocess.Popen:
    """``command`` in a new process, ``tests/`` importable, the slow backend told to write ``marker``
    once it runs; stdout and stderr together, as text."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SUPPORT), os.environ.get("PYTHONPATH", "")])}
    env["HOSTILE_MARKER"] = str(marker)
    # A shell without job control starts background commands with SIGINT ignored, and a child inherits
    # that; a Python handler here is reset to the default in the child instead.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return subprocess.Popen(
            command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
    finally:
        signal.signal(signal.SIGINT, previous)


def wait_until_started(marker: Path, process: subprocess.Popen, timeout: float = 120.0) -> None:
    """Until the slow backend has started (it writes ``marker``); fail if the process ends first."""
    deadline = time.monotonic() + timeout
    while not marker.exists():
        if process.poll() is not None:
            pytest.fail(f"crosscheck ended (exit {process.returncode}) before the slow backend started")
        if time.monotonic() > deadline:
            pytest.fail(f"the slow backend did not start within {timeout:.0f} s")
        time.sleep(0.05)


def children(pid: int, *, deep: bool = False) -> list[int]:
    """The processes whose parent is ``pid`` (and, ``deep``, theirs in turn)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            if parent == pid:
                found += [int(entry.name), *(children(int(entry.name), deep=True) if deep else [])]
    return found


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, ended but not reaped, does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
