"""What every subcommand shares: the exit codes, the usage error and the parser that raises it.

The options declared once are in ``options``, the checks and writers of output files in ``outputs``,
the console, the progress bar and the report's rendering in ``terminal``. A subcommand module imports
these and the core, never another subcommand module.
"""

from __future__ import annotations

import argparse
from typing import Any

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
