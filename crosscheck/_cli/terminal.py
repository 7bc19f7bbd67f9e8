"""The terminal: the console, text shown literally (``escape``), the progress bar, and a report
rendered with its exit status.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import IO, TYPE_CHECKING, Any

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


#: Outside a terminal a progress line is written once this many seconds have passed since the last
#: one (or the start), the work having moved on by ``PLAIN_STEP`` of its total (or finished, or a new
#: phase begun), and at most ``PLAIN_MOST`` a run: a CI log of a ten-minute run gets about ten lines.
PLAIN_EVERY_S, PLAIN_STEP, PLAIN_MOST = 30.0, 0.1, 20


class progress_display:
    """Progress on stderr, for every long command: in a terminal a rich bar, shown once the work is
    expected to take a couple of seconds; elsewhere (a pipe, a CI log) a plain line now and then
    (``PLAIN_EVERY_S``); nothing when ``quiet``. Each tells what is done of what is planned (the model
    oracle's loss evaluations, its plan growing where it refines).

    Args:
        quiet: show nothing (``--quiet``).
        stream: where to write (default stderr); clock: seconds, monotonic (default ``time.perf_counter``).
    """

    def __init__(
        self, *, quiet: bool = False, stream: IO[str] | None = None, clock: Callable[[], float] | None = None
    ):
        import time

        self._quiet, self._stream = quiet, stream
        self._time = time.perf_counter if clock is None else clock

    def __enter__(self) -> Callable[[str, int, int], None]:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TaskProgressColumn,
            TextColumn,
            TimeRemainingColumn,
        )

        self._first: dict[str, tuple[float, int]] = {}
        console = Console(stderr=self._stream is None, file=self._stream)
        #: Only a terminal shows a bar: in a pipe or a CI log a "transient" bar leaves an empty line.
        self.terminal = console.is_terminal
        self.lines = _PlainLines(console.file, self._time)
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
        """Told that ``done`` of ``total`` of ``description``'s work is done."""
        if self._quiet:
            return
        if not self.terminal:
            self.lines(description, done, total)
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


class _PlainLines:
    """Progress as plain lines, for a reader of a log: ``PLAIN_EVERY_S``, ``PLAIN_STEP``, ``PLAIN_MOST``."""

    def __init__(self, stream: IO[str], clock: Callable[[], float]) -> None:
        self._stream, self._clock = stream, clock
        self._start = self._last_time = clock()
        self._last: tuple[str, int] | None = None  # the description and the work done last written
        self.written = 0

    def __call__(self, description: str, done: int, total: int) -> None:
        if self.written >= PLAIN_MOST:
            return
        now = self._clock()
        if now - self._last_time < PLAIN_EVERY_S:
            return
        fraction = done / total if total > 0 else 1.0
        if self._last is not None and self._last[0] == description:
            finished = done >= total > self._last[1]  # its last line, where it is less than a step on
            if done - self._last[1] < PLAIN_STEP * total and not finished:
                return
        from crosscheck._errors import one_line

        seconds = now - self._start
        self._stream.write(
            f"{one_line(description)}: {done:,} of {total:,} ({fraction:.0%}) after {seconds:.0f} s\n"
        )
        self._stream.flush()
        self._last, self._last_time = (description, done), now
        self.written += 1
