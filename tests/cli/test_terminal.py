"""Progress on stderr (``_cli/terminal.py``'s ``progress_display``): outside a terminal a plain line now
and then, bounded in number; nothing with ``--quiet``; no plain line in a terminal. A fake clock and a
string stream: nothing sleeps."""

from __future__ import annotations

import io

import pytest

from crosscheck._cli import terminal
from crosscheck._cli.main import main


class Clock:
    """Seconds that pass only when told to."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture(autouse=True)
def _no_forced_terminal(monkeypatch):
    """rich takes these variables over the stream's own answer."""
    for name in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "NO_COLOR"):
        monkeypatch.delenv(name, raising=False)


def _run(display, clock, *, seconds, phases=("oracle: loss",), total=1000):
    """Each phase's work spread evenly over ``seconds``, a call a second; returns what was written."""
    with display as progress:
        for phase in phases:
            for second in range(seconds):
                clock.now += 1.0
                progress(phase, (second + 1) * total // seconds, total)


def _lines(stream) -> list[str]:
    return stream.getvalue().splitlines()


def test_outside_a_terminal_a_long_run_writes_a_line_every_30_s_and_tenth_of_its_work():
    clock, stream = Clock(), io.StringIO()
    _run(terminal.progress_display(stream=stream, clock=clock), clock, seconds=600)
    lines = _lines(stream)
    # Ten minutes: the first line at 30 s, then every tenth of the work (60 s apart), and the end.
    assert lines[0] == "oracle: loss: 50 of 1,000 (5%) after 30 s"
    assert lines[1] == "oracle: loss: 150 of 1,000 (15%) after 90 s"
    assert lines[-1] == "oracle: loss: 1,000 of 1,000 (100%) after 600 s"
    assert len(lines) == 11


def test_lines_are_at_least_30_s_apart_however_fast_the_work_moves():
    clock, stream = Clock(), io.StringIO()
    _run(terminal.progress_display(stream=stream, clock=clock), clock, seconds=100)
    assert [line.rsplit("after ", 1)[1] for line in _lines(stream)] == ["30 s", "60 s", "90 s"]


def test_a_short_run_writes_nothing():
    clock, stream = Clock(), io.StringIO()
    _run(terminal.progress_display(stream=stream, clock=clock), clock, seconds=29)
    assert stream.getvalue() == ""


def test_a_long_run_of_many_phases_writes_at_most_plain_most_lines():
    clock, stream = Clock(), io.StringIO()
    phases = [f"oracle: function {i}" for i in range(40)]
    _run(terminal.progress_display(stream=stream, clock=clock), clock, seconds=120, phases=phases)
    lines = _lines(stream)
    assert len(lines) == terminal.PLAIN_MOST
    assert lines[0].startswith("oracle: function 0: ")  # a new phase is worth a line, 30 s on


def test_quiet_writes_nothing():
    clock, stream = Clock(), io.StringIO()
    _run(terminal.progress_display(quiet=True, stream=stream, clock=clock), clock, seconds=600)
    assert stream.getvalue() == ""


def test_a_terminal_gets_no_plain_line():
    clock, stream = Clock(), Tty()
    with terminal.progress_display(stream=stream, clock=clock) as progress:
        progress("oracle: loss", 0, 10)
        clock.now = 100.0
        progress("oracle: loss", 10, 10)  # done: no bar to start either
    assert stream.getvalue() == ""


def test_a_description_is_written_without_control_characters():
    clock, stream = Clock(), io.StringIO()
    with terminal.progress_display(stream=stream, clock=clock) as progress:
        clock.now = 31.0
        progress("oracle: `evil\x1b[2J`", 1, 2)
    assert "\x1b" not in stream.getvalue() and stream.getvalue().startswith("oracle: `evil [2J`: 1 of 2")


@pytest.mark.parametrize(("quiet", "expected"), [([], True), (["--quiet"], False)], ids=["plain", "quiet"])
def test_the_run_command_writes_progress_lines_to_stderr_unless_quiet(monkeypatch, capsys, quiet, expected):
    pytest.importorskip("torch")
    monkeypatch.setattr(terminal, "PLAIN_EVERY_S", 0.0)  # every tenth of the work, at once
    status = main(["run", "--layers", "3", "--dim", "4", "--batch", "3", "--backend", "torch", *quiet])
    assert status == 0
    err = capsys.readouterr().err
    assert ("oracle: 48 of 48 (100%)" in err) == expected, err
