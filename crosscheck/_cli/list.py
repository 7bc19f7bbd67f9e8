"""``crosscheck list``: the workloads and backends this installation offers, and whether each loads.

A broken plugin is a row with its error, never a crash: listing is how users find out what is broken.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from crosscheck._cli.common import EXIT_OK
from crosscheck._cli.terminal import escape, make_console
from crosscheck._report.text import plain


def register(subparsers: Any) -> None:
    """Add ``list`` to the ``crosscheck`` subparsers."""
    parser = subparsers.add_parser(
        "list",
        help="list the workloads and backends, whether each is available, and its version",
        description="List the workloads and backends (built-in and entry-point plugins), whether each "
        "loads, and its version.",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Print the inventory; exit 0 (an unavailable backend is information, not a failure)."""
    found = inventory()
    if args.json:
        print(json.dumps(found, indent=2))
        return EXIT_OK
    _render(found, make_console())
    return EXIT_OK


def inventory() -> dict[str, list[dict[str, Any]]]:
    """``{"workloads": [...], "backends": [...]}``: one row each with ``name``, ``kind``,
    ``available``, ``version``, ``source`` and ``error`` (empty when available). Loads every backend."""
    return {"workloads": _workloads(), "backends": _builtin_backends() + _plugin_backends()}


def _row(name: str, kind: str, source: str, *, version: str = "", error: str = "") -> dict[str, Any]:
    return {
        "name": name,
        "kind": kind,
        "available": not error,
        "version": version,
        "source": source,
        "error": error,
    }


def _workloads() -> list[dict[str, Any]]:
    from crosscheck import __version__

    try:
        from crosscheck._workloads.registry import available_workloads
    except ImportError:  # a crosscheck without the workload registry: the stack is built in
        return [_row("stack", "built-in", "crosscheck", version=__version__)]
    rows = []
    for name in available_workloads():
        error = ""
        try:
            from crosscheck._workloads.registry import load_workload

            load_workload(name)
        except ImportError:
            pass  # no loader to try: listed means available
        except Exception as exc:  # a broken workload is a row, not a crash
            error = f"{type(exc).__name__}: {exc}"
        rows.append(_row(name, "built-in", "crosscheck", version=__version__, error=error))
    return rows


def _builtin_backends() -> list[dict[str, Any]]:
    from crosscheck._backends import BUILTINS, PACKAGE, backend_info, load_backend

    rows = []
    for name, (module, cls, _) in BUILTINS.items():
        source = f"{PACKAGE}.{module}:{cls}"
        try:
            info = backend_info(load_backend(name))
        except Exception as exc:
            rows.append(_row(name, "built-in", source, error=str(exc)))
            continue
        version = f"{info.get('framework', '')} {info.get('version', '')}".strip()
        rows.append(_row(name, "built-in", source, version=version))
    return rows


def _plugin_backends() -> list[dict[str, Any]]:
    from crosscheck._backends import plugin_entry_points

    rows = []
    for name, entry_point in sorted(plugin_entry_points().items()):
        dist = getattr(entry_point, "dist", None)
        version = f"{dist.name} {dist.version}" if dist is not None else ""
        error = _try_load_in_worker(name)
        rows.append(_row(name, "entry point", entry_point.value, version=version, error=error))
    return rows


#: Seconds a plugin may take to load in its worker (as a backend's worker under `--isolate`).
LOAD_SECONDS = 300
#: Where the worker's answer starts: a plugin may print to stdout while it loads.
_ANSWER = "crosscheck-list-answer:"
_WORKER = f"""
import json, sys
sys.path[:] = json.loads(sys.argv[2])
from crosscheck._cli.list import _try_load
error = _try_load(sys.argv[1])
sys.stdout.write("\\n{_ANSWER}" + json.dumps(error) + "\\n")
sys.stdout.flush()
"""


def _try_load_in_worker(name: str) -> str:
    """``_try_load(name)`` in a fresh process: a plugin is code from elsewhere, and a hostile one (an
    ``os._exit``, a crash, a hang at import) must end only its worker, never the listing."""
    import subprocess
    import sys

    command = [sys.executable, "-c", _WORKER, name, json.dumps(sys.path)]
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, errors="replace", timeout=LOAD_SECONDS, check=False
        )
    except subprocess.TimeoutExpired:
        return f"backend `{name}` did not load within {LOAD_SECONDS} s (its worker process was stopped)"
    except OSError as exc:  # no process could start: say so, do not load it here
        return f"backend `{name}` could not be loaded in a worker process: {exc}"
    for line in reversed(done.stdout.splitlines()):
        if line.startswith(_ANSWER):
            return str(json.loads(line.removeprefix(_ANSWER)))
    return (
        f"backend `{name}` ended its worker process while loading (exit status {done.returncode}), "
        "which a plugin must never do: a hostile or broken plugin"
    )


def _try_load(name: str) -> str:
    """Why the plugin ``name`` cannot be used ("" when it loads and its ``info()`` answers)."""
    from crosscheck._backends import backend_info, load_backend

    try:
        backend = load_backend(name)
    except Exception as exc:  # BackendBroken names the plugin and its error (a sys.exit included)
        return str(exc)
    info = backend_info(backend)  # never raises: a broken info() is an `info_error`
    return f"backend `{name}`: its info() failed: {info['info_error']}" if "info_error" in info else ""


def _render(found: dict[str, list[dict[str, Any]]], console: Any) -> None:
    from rich.table import Table

    for title, rows in found.items():
        table = Table(title=title, title_justify="left")
        for column in ("name", "kind", "available", "version", "source"):
            table.add_column(column, overflow="fold")
        for row in rows:
            available = "[green]yes[/green]" if row["available"] else "[red]no[/red]"
            # A plugin's name, version and entry point are its own text: never markup.
            name, kind, version, source = (escape(row[k]) for k in ("name", "kind", "version", "source"))
            table.add_row(name, kind, available, version, source)
        console.print(table)
        for row in rows:
            if row["error"]:
                console.print(plain(f"{row['name']}: {row['error']}"), markup=False, highlight=False)
