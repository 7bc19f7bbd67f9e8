"""What every subcommand shares: exit codes, the usage error, the console and progress bar, output
checks and writers, and the options declared once (the case, the tolerance pair, the backends).

A subcommand module imports this module and the core, never another subcommand module.
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

from crosscheck._compare.constants import DTYPES
from crosscheck._workloads.protocol import Knob
from crosscheck._workloads.registry import case_knobs

EXIT_OK, EXIT_FAIL, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


class UsageError(Exception):
    """A mistake of the user's: printed as one line, exit status 2."""


class HelpFormatter(argparse.HelpFormatter):
    """Help text wrapped between words only: names such as ``torch-plain`` are never split."""

    def _split_lines(self, text: str, width: int) -> list[str]:
        import textwrap

        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False, break_long_words=False)


class Parser(argparse.ArgumentParser):
    """An argument parser whose errors are ``UsageError`` (one line), not usage text and exit; its help
    never splits a name (``HelpFormatter``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(message)


# -- the case options, declared by the stack ------------------------------------------------------


#: Every option of a generated stack case, in the order ``--help`` lists them: the stack's knobs and its
#: point's (``--dtype``, ``--seed``), as the stack declares them (``Knob``: help, type, choices, default).
CASE_OPTIONS: dict[str, Knob] = case_knobs("stack")

#: The core's own defaults (the stack's), shown in ``--help`` where an option is left unset.
CASE_DEFAULTS: dict[str, Any] = {name: knob.default for name, knob in CASE_OPTIONS.items()}


def add_case_options(parser: Any, defaults: Mapping[str, Any] | None = None) -> None:
    """Add the case options to ``parser`` (a parser or an argument group).

    Args:
        parser: where the options go.
        defaults: ``None``: every case option, left ``None`` when not given (so that a caller can tell
            what the user gave) while ``--help`` shows the core's default; a mapping: only the options
            it names, in the table's order, with those defaults.
    """
    unknown = set(defaults or ()) - set(CASE_OPTIONS)
    if unknown:  # a programming error, not the user's
        raise ValueError(f"not case options: {', '.join(sorted(unknown))}")
    names = CASE_OPTIONS if defaults is None else [name for name in CASE_OPTIONS if name in defaults]
    for name in names:
        option = CASE_OPTIONS[name]
        shown = CASE_DEFAULTS[name] if defaults is None else defaults[name]
        parser.add_argument(
            f"--{name}",
            type=option.type,
            choices=option.choices,
            default=None if defaults is None else defaults[name],
            help=f"{option.help} (default {shown})",
        )


def add_matrix_options(parser: Any, names: Iterable[str]) -> None:
    """Add case options that each take a list (repeat the option): the sweep's matrix."""
    for name in names:
        option = CASE_OPTIONS[name]
        parser.add_argument(
            f"--{name}",
            action="append",
            type=option.type,
            # A sweep judges float32 and float64; a 16-bit case is one `crosscheck run` at a time.
            choices=DTYPES if name == "dtype" else option.choices,
            metavar="N" if option.type is int else None,
            help=f"{option.help} (repeatable)",
        )


def case_options_given(args: argparse.Namespace) -> dict[str, Any]:
    """The case options the user gave (those left ``None`` by ``add_case_options(parser)`` omitted)."""
    return {name: getattr(args, name) for name in CASE_OPTIONS if getattr(args, name, None) is not None}


# -- other options that several subcommands take ---------------------------------------------------


def add_backend_option(parser: Any, help: str) -> None:
    """``--backend NAME_OR_IMPORT_STRING``, repeatable."""
    parser.add_argument("--backend", action="append", metavar="NAME_OR_IMPORT_STRING", help=help)


def add_tolerance_options(parser: Any) -> None:
    """``--rtol`` and ``--atol``: the user's slack, given together (``check_tolerances``)."""
    parser.add_argument("--rtol", type=float, help="user slack: relative (needs --atol)")
    parser.add_argument("--atol", type=float, help="user slack: absolute (needs --rtol)")


def check_tolerances(args: argparse.Namespace) -> None:
    """``--rtol`` and ``--atol`` come together or not at all (torch's ``get_tolerances`` says why): the
    rule of ``crosscheck.Slack``, spelled as options."""
    from crosscheck._engine.records import check_pair

    try:
        check_pair(args.rtol, args.atol, front="cli")
    except ValueError as exc:
        raise UsageError(str(exc)) from exc


def add_jax_options(parser: Any) -> None:
    """``--jax-platform`` and ``--jax-precision``: where the JAX side runs and its matmul precision
    (``crosscheck.Execution``; checked by ``jax_settings``, with the API's words)."""
    parser.add_argument(
        "--jax-platform",
        metavar="{default,cpu}",
        help="where the JAX side runs: default (where JAX puts it: an accelerator when there is one) or "
        "cpu (the host CPU); each call, restored after it (default: default)",
    )
    parser.add_argument(
        "--jax-precision",
        metavar="{default,high,highest}",
        help="the JAX side's matrix-product precision: default (JAX's own: one bfloat16 pass for float32 "
        "on a TPU), high (three passes) or highest (float32's); each call, restored after it (default: "
        "default)",
    )


def jax_settings(args: argparse.Namespace) -> dict[str, str]:
    """``--jax-platform`` and ``--jax-precision`` as ``Execution``'s keywords (``default`` where not
    given), refused as the API refuses them, spelled as options."""
    from crosscheck._engine.records import check_jax

    given = {name: getattr(args, name, None) or "default" for name in ("jax_platform", "jax_precision")}
    try:
        check_jax(given["jax_platform"], given["jax_precision"], front="cli")
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    return given


def check_at_least(option: str, values: Any, *, least: int = 1, expected: str | None = None) -> None:
    """``option``'s value (or each of its values) is at least ``least``; ``expected`` words the bound."""
    for value in values if isinstance(values, (list, tuple)) else [values]:
        if value < least:
            raise UsageError(f"`{option}` must be {expected or f'at least {least}'}, found {value}.")


# -- output ----------------------------------------------------------------------------------------


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
    from crosscheck._report.report import dump_json

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


def render_report(report: Any, console: Any, *, quiet: bool) -> int:
    """Print a run's report (or, ``quiet``, only its verdict line and caveats); return the exit status."""
    if quiet:
        from crosscheck._cli.quiet import render

        render(report, console)
    else:
        report.render(console)
    if getattr(report, "interrupted", False):
        return EXIT_INTERRUPTED  # Ctrl-C: what finished was reported; the run did not complete
    return EXIT_OK if report.passed else EXIT_FAIL


# -- the terminal ----------------------------------------------------------------------------------


def escape(text: Any) -> str:
    """``text`` (a backend's name, a spec, an error, a path) as rich shows it literally, not as markup,
    and without control characters (an entry point's name is a plugin's text: no terminal escapes)."""
    from crosscheck._report.text import markup_lines

    return markup_lines(text)


def make_console() -> Any:
    """A rich console for stdout; at least 132 columns wide when it is not a terminal. No emoji codes:
    a backend named ``mod:factory`` prints ``mod:factory: failed``, not a factory pictogram."""
    from rich.console import Console

    console = Console(highlight=False, emoji=False)
    if not console.is_terminal:
        console = Console(highlight=False, emoji=False, width=max(console.width, 132))
    return console


def format_bytes(n: float) -> str:
    """``1.5 MiB``: a byte count at a readable unit."""
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n:.0f} B"


class progress_display:
    """A rich progress bar on stderr, shown only once work is expected to take a couple of seconds: what
    is done of what is planned (the model oracle's loss evaluations, its plan growing where it refines)."""

    def __enter__(self) -> Callable[[str, int, int], None]:
        import time

        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TaskProgressColumn,
            TextColumn,
            TimeRemainingColumn,
        )

        self._time = time.perf_counter
        self._first: dict[str, tuple[float, int]] = {}
        console = Console(stderr=True)
        #: Only a terminal shows a bar: in a pipe or a CI log a "transient" bar leaves an empty line.
        self.terminal = console.is_terminal
        self._bar = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TaskProgressColumn(),
            TimeRemainingColumn(),
            console=console,
            transient=True,
        )
        self._tasks: dict[str, Any] = {}
        return self.update

    def update(self, description: str, done: int, total: int) -> None:
        if not self.terminal:
            return
        now = self._time()
        if description not in self._tasks:
            # Show the bar only when the rate so far predicts more than ~2 s still to go.
            first_time, first_done = self._first.setdefault(description, (now, done))
            rate = (done - first_done) / (now - first_time) if now > first_time else 0.0
            if rate <= 0 or (total - done) / rate < 2.0:
                return
            self._bar.start()
            self._tasks[description] = self._bar.add_task(description, total=total)
        self._bar.update(self._tasks[description], completed=done)

    def __exit__(self, *exc: object) -> None:
        if self._tasks:  # stopping a bar that never started still writes a newline to stderr
            self._bar.stop()
