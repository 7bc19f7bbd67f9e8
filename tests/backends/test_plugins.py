"""Backends published by entry point: a real installed package, and broken ones that never stop the rest.

The packages (``examples/crosscheck-plugin-demo`` and ``tests/plugins/crosscheck-plugin-broken``) are
really installed, with pip, into a temporary folder put on ``sys.path``: ``importlib.metadata`` then
finds their entry points exactly as for a package installed in site-packages. Offline: no index, no
build isolation (hatchling, the build backend, comes with the ``test`` extra).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from paths import PLUGINS, ROOT

import crosscheck
from crosscheck import BackendBroken
from crosscheck._cli.main import main

DEMO = ROOT / "examples" / "crosscheck-plugin-demo"
BROKEN = PLUGINS / "crosscheck-plugin-broken"
SMALL = ["--layers", "3", "--batch", "2", "--dim", "4"]

#: Each broken entry point and fragments its error must contain.
BROKEN_PLUGINS = {
    "broken-import": ["ModuleNotFoundError", "crosscheck_no_such_dependency"],
    "broken-attribute": ["AttributeError", "NoSuchBackend"],
    "broken-factory": ["calling the factory failed", "RuntimeError: no licence server"],
}


@pytest.fixture(scope="module")
def plugin_site(tmp_path_factory) -> Path:
    """A folder into which pip installed both plugin packages."""
    pytest.importorskip("hatchling", reason="the plugins' build backend (in the `test` extra)")
    site = tmp_path_factory.mktemp("site")
    command = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation"]
    command += ["--no-index", "--target", str(site), str(DEMO), str(BROKEN)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in site.glob("*.dist-info")) == [
        "crosscheck_plugin_broken-0.0.1.dist-info",
        "crosscheck_plugin_demo-0.1.0.dist-info",
    ]
    return site


@pytest.fixture
def plugins(plugin_site, monkeypatch):
    monkeypatch.syspath_prepend(str(plugin_site))
    yield plugin_site
    for name in [m for m in sys.modules if m.startswith("crosscheck_plugin_")]:
        del sys.modules[name]


def test_an_installed_entry_point_is_a_backend(plugins):
    report = crosscheck.run(layers=3, batch=2, dim=4, backends=["demo"])
    assert report.passed, report.problems
    assert report.backends["demo"].info["version"] == "0.1.0"
    assert report.backends["demo"].info["framework"] == "numpy (crosscheck-plugin-demo)"


@pytest.mark.parametrize("name", list(BROKEN_PLUGINS))
def test_a_broken_plugin_says_why(plugins, name):
    with pytest.raises(BackendBroken) as exc:
        crosscheck.load_backend(name)
    message = str(exc.value)
    assert message.startswith(f"backend `{name}` (entry point `{name} = crosscheck_plugin_broken")
    assert "of crosscheck-plugin-broken 0.0.1) failed to load: " in message
    for fragment in BROKEN_PLUGINS[name]:
        assert fragment in message


@pytest.mark.parametrize("name", list(BROKEN_PLUGINS))
def test_run_reports_a_broken_plugin_and_checks_the_others(plugins, tmp_path, capsys, name):
    path = tmp_path / "report.json"
    status = main(["run", *SMALL, "--backend", "demo", "--backend", name, "--json", str(path)])
    out = capsys.readouterr().out
    assert status == 1, out
    report = json.loads(path.read_text())
    assert report["backends"]["demo"]["status"] == "ok"
    assert [c["backend"] for c in report["comparisons"]] == ["demo"]
    assert report["comparisons"][0]["passed"] is True
    broken = report["backends"][name]
    assert broken["status"] == "failed"
    for fragment in BROKEN_PLUGINS[name]:
        assert fragment in broken["error"]
    assert report["problems"] == [f"`{name}` failed: {broken['error']}"]
    assert f"FAILED: `{name}` failed" in out


def test_list_shows_versions_and_broken_plugins(plugins, capsys):
    assert main(["list", "--json"]) == 0
    found = json.loads(capsys.readouterr().out)
    rows = {row["name"]: row for row in found["backends"]}
    assert rows["demo"]["available"] is True
    assert rows["demo"]["kind"] == "entry point"
    assert rows["demo"]["version"] == "crosscheck-plugin-demo 0.1.0"
    assert rows["demo"]["source"] == "crosscheck_plugin_demo:DemoBackend"
    for name, fragments in BROKEN_PLUGINS.items():
        assert rows[name]["available"] is False
        for fragment in fragments:
            assert fragment in rows[name]["error"]
    assert rows["numpy-fd"]["available"] is True
    assert rows["numpy-fd"]["version"].startswith("numpy ")
    assert "stack" in [row["name"] for row in found["workloads"]]


def test_list_table_in_a_real_process(plugin_site):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(plugin_site), env.get("PYTHONPATH", "")])
    result = subprocess.run(
        [sys.executable, "-m", "crosscheck", "list"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    lines = {line.split()[1]: line for line in result.stdout.splitlines() if line.startswith("│")}
    assert " yes " in lines["demo"]
    assert "crosscheck-plugin-demo 0.1.0" in lines["demo"]
    for name in BROKEN_PLUGINS:
        assert " no " in lines[name], result.stdout
        assert f"{name}: backend `{name}`" in result.stdout


def _dist(site: Path, module: str, source: str, entry_points: dict[str, str]) -> None:
    """A package "installed" by hand: a module and a ``.dist-info`` that ``importlib.metadata`` reads."""
    (site / f"{module}.py").write_text(source)
    info = site / f"{module.replace('_', '-')}-0.0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module}\nVersion: 0.0.1\n")
    lines = "".join(f"{name} = {value}\n" for name, value in entry_points.items())
    (info / "entry_points.txt").write_text("[crosscheck.backends]\n" + lines)


ESC = "\x1b]0;pwned\x07\x1b[2J"


def test_control_characters_of_an_entry_point_never_reach_the_terminal(tmp_path, monkeypatch, capsys):
    source = f"raise RuntimeError({'licence expired' + ESC!r})\n"
    _dist(tmp_path, "crosscheck_evil_plugin", source, {f"evil{ESC}": "crosscheck_evil_plugin:grad"})
    monkeypatch.syspath_prepend(str(tmp_path))
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out
    assert "evil ]0;pwned" in out  # the name is there, its control characters are not
    assert "RuntimeError: licence expired" in out


def test_control_characters_of_a_backend_never_reach_a_sweep_table():
    from types import SimpleNamespace

    from rich.console import Console

    from crosscheck._cli.sweep import render

    comparison = {"backend": f"evil{ESC}", "passed": True, "unjudgeable": 0, "two_sided": 0}
    record = {
        "case": {"workload": "stack", "init": "gaussian", "layers": 2, "batch": 2, "dim": 2},
        "report": {"comparisons": [{**comparison, "max_rel_diff": 1e-7}], "backends": {}},
        "known_answer": "",
        "passed": False,
        "status": "error",
        "error": f"boom{ESC}",
        "seconds": 1.0,
    }
    record["case"].update(dtype="float32", seed=0)
    result = SimpleNamespace(records=[record], counts=lambda: {"passed": 0, "error": 1}, interrupted=None)
    console = Console(record=True, width=200, force_terminal=False)
    render(result, console)
    out = console.export_text()
    assert "\x1b" not in out and "\x07" not in out
    assert "evil ]0;pwned" in out and "boom ]0;pwned" in out


HOSTILE_AT_IMPORT = "import os\nos._exit(3)\n"


def test_a_plugin_that_ends_its_process_at_import_cannot_end_the_listing(tmp_path):
    _dist(
        tmp_path,
        "crosscheck_exit_plugin",
        HOSTILE_AT_IMPORT,
        {"exit-at-import": "crosscheck_exit_plugin:grad"},
    )
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), env.get("PYTHONPATH", "")])
    result = subprocess.run(
        [sys.executable, "-m", "crosscheck", "list", "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    rows = {row["name"]: row for row in json.loads(result.stdout)["backends"]}
    assert rows["exit-at-import"]["available"] is False
    assert rows["exit-at-import"]["error"] == (
        "backend `exit-at-import` ended its worker process while loading (exit status 3), which a plugin "
        "must never do: a hostile or broken plugin"
    )
    assert rows["numpy-fd"]["available"] is True
