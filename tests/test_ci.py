"""``.ci/run``, what CI runs on a clean clone: the lint first (a lint error fails the run before any test),
then the README's test command; the CI guide shows the script as it is."""

from __future__ import annotations

import re

from paths import ROOT

SCRIPT = (ROOT / ".ci" / "run").read_text(encoding="utf-8")


def _commands() -> list[str]:
    return [
        line.strip() for line in SCRIPT.splitlines() if line.strip() and not line.lstrip().startswith("#")
    ]


def test_ci_stops_at_the_first_failing_command():
    assert "set -euo pipefail" in _commands()


def test_ci_runs_the_lint_before_the_readme_test_command():
    commands = _commands()
    assert "nox -s lint" in commands and "nox -s tests" in commands
    assert commands.index("nox -s lint") < commands.index("nox -s tests")
    assert commands[-1] == "nox -s tests"  # the README's test command, and nothing after it
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert re.search(r"^\$ pip install nox && nox -s tests\b", readme, re.M)


def test_the_ci_guide_shows_the_script_as_it_is():
    guide = (ROOT / "docs" / "guides" / "ci.md").read_text(encoding="utf-8")
    assert "```bash\n" + SCRIPT + "```" in guide
