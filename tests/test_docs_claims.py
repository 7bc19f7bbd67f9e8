"""What the documentation claims holds: every ``pip install`` line works from a clone today (or says
it is for once the distribution is published)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
#: Tools from the package index that the docs install by name (not crosscheck).
TOOLS = {"nox", "pytest"}
#: Options of ``pip install`` that take a value.
VALUED = {"-c", "--constraint", "--extra-index-url", "--index-url", "-r"}
PIP = re.compile(r"pip install ([^`\n]*)")


def _targets(arguments: str) -> list[str]:
    """What a ``pip install`` installs (its arguments less options), up to a ``&&``, ``;`` or comment."""
    words = shlex.split(re.split(r"&&|;|\s#|\)", arguments)[0].strip().rstrip("."), comments=True)
    targets, skip = [], False
    for word in words:
        if skip or word.startswith("-"):
            skip = word in VALUED and not skip
            continue
        targets.append(word)
    return targets


def install_lines() -> list[tuple[str, str, list[str]]]:
    """``(page:line, line, targets)`` of every ``pip install`` in README and the docs."""
    found = []
    for page in PAGES:
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            for match in PIP.finditer(line):
                found.append((f"{page.relative_to(ROOT)}:{number}", line, _targets(match.group(1))))
    return found


def _works_from_a_clone(target: str) -> bool:
    return target.startswith(".") or target in TOOLS


def test_every_pip_install_line_installs_from_the_clone_or_says_once_published():
    lines = install_lines()
    assert len(lines) > 10  # README, install, the guides
    wrong = [
        f"{where}: {line.strip()}"
        for where, line, targets in lines
        if not all(_works_from_a_clone(t) for t in targets)
        and "once published" not in line
        and "installs that" not in line  # the unrelated `crosscheck` on the index, said as such
    ]
    assert wrong == []


@pytest.mark.parametrize(
    ("line", "targets"),
    [
        ('(`pip install ".[all,port]" -c constraints.txt`):', [".[all,port]"]),
        ("with `pip install 'crosscheck-gradients[all,port]'` (Flax", ["crosscheck-gradients[all,port]"]),
        ("$ pip install nox && nox -s tests        # the test suite", ["nox"]),
        ('$ pip install ".[all]" -c constraints.txt --extra-index-url https://x/whl/cpu', [".[all]"]),
        (
            "$ pip install ./examples/crosscheck-plugin-demo ./tests/plugins/b",
            ["./examples/crosscheck-plugin-demo", "./tests/plugins/b"],
        ),
    ],
    ids=["clone", "index", "a-tool", "options", "folders"],
)
def test_the_parser_reads_targets_and_skips_options(line, targets):
    match = PIP.search(line)
    assert match is not None and _targets(match.group(1)) == targets
