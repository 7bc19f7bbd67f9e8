"""The files a subcommand writes: each checked before the work (not a special file, not one of the
run's inputs, its folder there), made absolute, and written with a one-line error when it cannot be.
"""

from __future__ import annotations

import argparse
import errno
import os
import stat
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from crosscheck._cli.common import UsageError


def check_output(
    path: str | None, option: str = "--json", *, inputs: Mapping[str, Any] | None = None
) -> None:
    """Fail before the work, not after it, when a report cannot be written: a symbolic link loop, a
    FIFO nobody reads (writing would wait forever) or another special file, its folder is missing, it
    is a directory, or it is one of the run's ``inputs``, which it would overwrite. An ``inputs`` key
    is an option (``--weights``) or, for a file read without being named, a phrase saying what it is."""
    if path is None:
        return
    _check_special(path, option)
    if Path(path).is_dir():
        raise UsageError(f"cannot write `{option}` {path}: it is a directory; give a file name.")
    if not Path(os.path.realpath(path)).parent.is_dir():
        raise UsageError(f"cannot write `{option}` {path}: its folder does not exist.")
    for name, given in (inputs or {}).items():
        if given is not None and _same_file(path, given):
            what = f"the input of `{name}`" if name.startswith("--") else name
            raise UsageError(f"cannot write `{option}` {path}: it is {what}, which it would overwrite.")


def check_outputs(outputs: Mapping[str, Any], inputs: Mapping[str, Any] | None = None) -> None:
    """``check_output`` for each of ``outputs`` (option -> path or None), and no two the same file."""
    given = {option: path for option, path in outputs.items() if path is not None}
    for option, path in given.items():
        check_output(path, option, inputs=inputs)
    for i, (first, a) in enumerate(given.items()):
        for second, b in list(given.items())[i + 1 :]:
            if _same_file(a, b):
                raise UsageError(f"`{first}` and `{second}` name the same file, {a}: give each its own.")


def check_writes(
    args: argparse.Namespace,
    outputs: Mapping[str, str],
    *,
    specs: Iterable[Any] = (),
    inputs: Mapping[str, Any] | None = None,
) -> None:
    """The one rule every writer of every command goes through, before any work: each output
    (``outputs``: option -> attribute of ``args``) can be written and overwrites no input of the run
    (``inputs``) nor the source of a backend or workload it loads by import string (``specs``), no two
    the same file (``check_outputs``); then each is made absolute (``absolute_outputs``)."""
    given = {option: getattr(args, name, None) for option, name in outputs.items()}
    check_outputs(given, inputs={**(inputs or {}), **source_files(specs)})
    absolute_outputs(args, outputs.values())


def absolute_outputs(args: argparse.Namespace, names: Iterable[str]) -> None:
    """Each output path of ``args`` (attribute ``names``) made absolute, before any backend or workload
    runs: one that changes the working directory must not move where the reports land."""
    for name in names:
        if getattr(args, name, None) is not None:
            setattr(args, name, os.path.abspath(getattr(args, name)))


#: FIFOs probed and found read, held open until exit: a reader sees end of file when the last writer
#: closes, and would be gone by the time the report is written (which would then wait forever).
_HELD: list[int] = []


def _check_special(path: str, option: str) -> None:
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UsageError(f"cannot write `{option}` {path}: it is a symbolic link loop.") from exc
        return  # not there yet (or unreachable: the folder check says so)
    if stat.S_ISFIFO(mode):
        try:
            _HELD.append(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
        except OSError as exc:
            raise UsageError(
                f"cannot write `{option}` {path}: it is a FIFO nobody reads; writing the report would "
                "wait forever."
            ) from exc
    elif not (stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISCHR(mode)):
        raise UsageError(f"cannot write `{option}` {path}: it is not a regular file.")


def _same_file(a: Any, b: Any) -> bool:
    try:
        return Path(a).samefile(b)
    except OSError:  # one is not there yet, or a loop
        return os.path.realpath(a) == os.path.realpath(b)


def source_files(specs: Iterable[Any]) -> dict[str, str]:
    """The source file of each import string's module (``pkg.mod:attr``), found without importing it:
    an output must not overwrite the code of a backend or a workload the run loads."""
    found = {}
    for spec in specs:
        if isinstance(spec, str) and ":" in spec:
            origin = _module_file(spec.partition(":")[0])
            if origin is not None:
                found[f"the source of `{spec}`"] = origin
    return found


def _module_file(module: str) -> str | None:
    from importlib.machinery import PathFinder

    loaded = sys.modules.get(module)
    if loaded is not None:
        return getattr(loaded, "__file__", None)
    parts, search, origin = module.split("."), None, None
    for i in range(len(parts)):
        try:
            spec = PathFinder.find_spec(".".join(parts[: i + 1]), search)
        except (ImportError, ValueError, OSError):
            return None
        if spec is None:
            return None
        search, origin = spec.submodule_search_locations, spec.origin
    return origin


def check_plot_path(path: str | None) -> None:
    """``--plot`` names an image file matplotlib can write (by its extension), before any work."""
    if path is None:
        return
    from matplotlib.backend_bases import FigureCanvasBase

    known = FigureCanvasBase.get_supported_filetypes()
    suffix = Path(path).suffix.lower().removeprefix(".")
    if suffix not in known:
        found = f"its extension is .{suffix}" if suffix else "it has no extension"
        raise UsageError(
            f"cannot write `--plot` {path}: {found}; give an image file name ending in "
            f"{', '.join('.' + k for k in sorted(known))}."
        )


def _cannot_write(option: str, path: Any, exc: OSError) -> UsageError:
    return UsageError(f"cannot write `{option}` {path}: {exc.strerror or exc}")


def write_json(path: str | None, data: Any, option: str = "--json") -> None:
    """Write ``data`` as indented JSON, when a path was given."""
    if path is None:
        return
    from crosscheck._report.jsonfile import dump_json

    try:
        dump_json(data, path)
    except OSError as exc:
        raise _cannot_write(option, path, exc) from exc


def write_file(path: str | None, option: str, write: Callable[[str], Any]) -> None:
    """Call ``write(path)`` when a path was given; an ``OSError`` is the user's (exit 2)."""
    if path is None:
        return
    try:
        write(path)
    except OSError as exc:
        raise _cannot_write(option, path, exc) from exc


def write_junit(path: str | None, reports: Any) -> None:
    """A JUnit XML file of ``(name, report)`` pairs, a suite each, when a path was given."""
    from crosscheck._report.junit import write_junit as _write_junit

    write_file(path, "--junit", lambda p: _write_junit(reports, p))


def write_reports(args: argparse.Namespace, report: Any) -> None:
    """Write one run's ``--json`` and ``--junit`` files, when asked for."""
    from crosscheck._report.junit import case_name

    write_file(args.json, "--json", report.write_json)
    write_junit(args.junit, [(case_name(report), report)])
