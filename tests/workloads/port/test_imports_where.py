"""What a port's command imports where it does not need it, each seen in a fresh Python (``sys.modules``):
the command that prints a worker's report rebuilds a port's mapping section without importing the
judges or the oracle, and a port refused for its declaration is refused before they are imported."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
from paths import ROOT, SUPPORT

from crosscheck._report.wire import to_wire

#: The modules a report's printing and a refusal have no use for: the port's judges, the model's judge
#: and the oracle it builds on.
UNNEEDED = ("crosscheck._workloads.port.judge", "crosscheck._workloads.model.judge")
ORACLE = "crosscheck._workloads.model.oracle"


def _imported_by(code: str) -> list[str]:
    """The modules of ``UNNEEDED`` and the oracle that ``code``, run in a fresh Python, imported."""
    report = (
        "\nimport json, sys\n"
        f"print(json.dumps(sorted(m for m in sys.modules if m.startswith({(*UNNEEDED, ORACLE)!r}))))\n"
    )
    path = os.pathsep.join([str(ROOT), str(SUPPORT), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path}
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code) + report],
        capture_output=True, text=True, timeout=300, check=False, env=env, cwd=ROOT,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_a_ports_mapping_section_is_rebuilt_without_its_judges():
    """The parent of a contained run rebuilds each section of the worker's report by its module: a
    port's mapping, which both checks print, imports the table, not the judges and the oracle."""
    from crosscheck._workloads.port.judge import forward, gradient

    assert forward.MAPPING is gradient.MAPPING  # the one section both checks hand over
    data = json.dumps(to_wire(forward.MAPPING))
    code = f"""
        import json
        from crosscheck._report.wire import from_wire
        section = from_wire(json.loads({data!r}))
        assert section.place == "before" and callable(section.render)
    """
    assert _imported_by(code) == []


def test_a_refused_port_is_refused_before_the_judges_are_imported():
    pytest.importorskip("torch")
    pytest.importorskip("jax")
    code = """
        import crosscheck
        from tests.workloads.port.declare.test_problems import square_port

        try:
            crosscheck.check(square_port(ambiguous=False), reference="torch")
        except ValueError as refused:
            assert "2 problems" in str(refused), refused
        else:
            raise AssertionError("the port was not refused")
    """
    assert _imported_by(code) == []
