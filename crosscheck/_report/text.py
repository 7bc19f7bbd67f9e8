"""Text from elsewhere made safe to show.

A backend's name, spec and error, a workload's parameter names and a bundle's case are text crosscheck
did not write: on a terminal or in a JUnit file it must stay text. Control characters are dropped and
whitespace folded (``crosscheck._errors.one_line``, line by line where the text has several), and where
rich reads markup it is escaped, so ``[/]evil[bold]`` prints as written.
"""

from __future__ import annotations

from typing import Any

from crosscheck._errors import one_line


def plain(text: Any) -> str:
    """``text`` line by line, each without control characters: for ``markup=False`` prints and XML."""
    return "\n".join(one_line(line) for line in str(text).splitlines())


def markup(text: Any) -> str:
    """``text`` on one line, escaped for rich markup: for a table cell or a markup print."""
    from rich.markup import escape

    return escape(one_line(str(text)))


def markup_lines(text: Any) -> str:
    """``text`` line by line (``plain``), escaped for rich markup: for a title of several lines."""
    from rich.markup import escape

    return escape(plain(text))


#: A verdict names up to this many things; beyond, the first few and how many more (a deep model's
#: line would otherwise list all 200 parameters; the table and the JSON report have each).
SHOWN = 4


def plural(names: list[str], noun: str = "parameter") -> str:
    """``parameters `a`, `b`, `c` and 197 more``: ``noun`` (plural where there are several), then at
    most ``SHOWN`` distinct names in a line."""
    unique = list(dict.fromkeys(names))
    shown = unique if len(unique) <= SHOWN else [*unique[: SHOWN - 1], f"{len(unique) - SHOWN + 1} more"]
    listed = ", ".join(shown[:-1]) + " and " + shown[-1] if len(unique) > SHOWN else ", ".join(shown)
    return f"{noun}{'' if len(unique) == 1 else 's'} {listed}"
