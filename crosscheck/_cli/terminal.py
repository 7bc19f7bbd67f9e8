"""The terminal: the console, text shown literally (``escape``), the progress bar, and a report
rendered with its exit status.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from crosscheck._cli.common import EXIT_FAIL, EXIT_INTERRUPTED, EXIT_OK

if TYPE_CHECKING:  # rich is imported when a console is made
    from rich.console import Console


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


def escape(text: Any) -> str:
    """``text`` (a backend's name, a spec, an error, a path) as rich shows it literally, not as markup,
    and without control characters (an entry point's name is a plugin's text: no terminal escapes)."""
    from crosscheck._report.text import markup_lines

    return markup_lines(text)


def make_console() -> Console:
    """A rich console for stdout; at least 132 columns wide when it is not a terminal. No emoji codes:
    a backend named ``mod:factory`` prints ``mod:factory: failed``, not a factory pictogram."""
    from rich.console import Console

    console = Console(highlight=False, emoji=False)
    if not console.is_terminal:
        console = Console(highlight=False, emoji=False, width=max(console.width, 132))
    return console


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
