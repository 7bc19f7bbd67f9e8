"""The command-line reference as Markdown, made from the parser itself (so it cannot drift from it).

``docs/reference/cli.md`` holds it, after ``MARKER``, in the repository (a page read on GitHub or in
the clone is the reference, not an empty page): ``python -m crosscheck._cli.reference`` (``REGENERATE``)
writes it there again; ``tests/docs/test_docs.py`` fails when the page is not what the parser makes, and
checks that it names every command and option. The documentation site's hook
(``docs/_hooks/cli_reference.py``) regenerates it too when the site is built.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from crosscheck._cli.main import EPILOG, build_parser

#: Where the generated reference starts in ``docs/reference/cli.md``: what follows it is ``markdown()``.
MARKER = "<!-- the command-line reference, generated from the parser -->"
#: The page, from the repository's root, and the command that writes it again.
PAGE = "docs/reference/cli.md"
REGENERATE = "python -m crosscheck._cli.reference"

#: Options every subcommand has; the reference states them once.
_COMMON = {"-h", "--help"}


def subcommands(parser: argparse.ArgumentParser | None = None) -> dict[str, argparse.ArgumentParser]:
    """``{name: subparser}`` in the order ``crosscheck --help`` lists them."""
    parser = parser or build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def _summaries(parser: argparse.ArgumentParser) -> dict[str, str]:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {a.dest: a.help or "" for a in action._choices_actions}


def _cell(text: Any) -> str:
    """Text for a Markdown table cell: one line, pipes escaped."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _invocation(action: argparse.Action) -> str:
    """``--layers LAYERS``, ``--strict, --no-strict``, ``--dtype {float32,float64}``."""
    if not action.option_strings:
        return str(action.metavar or action.dest)
    if action.nargs == 0:
        return ", ".join(action.option_strings)
    metavar = (
        str(action.metavar)
        if action.metavar
        else ("{" + ",".join(map(str, action.choices)) + "}" if action.choices else action.dest.upper())
    )
    return ", ".join(f"{option} {metavar}" for option in action.option_strings)


def _usage(parser: argparse.ArgumentParser) -> str:
    formatter = argparse.HelpFormatter(parser.prog, width=100)
    formatter.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups)
    return formatter.format_help().strip()


def _command(name: str, parser: argparse.ArgumentParser, summary: str) -> list[str]:
    lines = [f"## `crosscheck {name}`", "", _cell(parser.description or summary), ""]
    lines += ["```text", _usage(parser), "```", ""]
    for group in parser._action_groups:
        actions = [
            a
            for a in group._group_actions
            if a.help != argparse.SUPPRESS and not _COMMON.intersection(a.option_strings)
        ]
        if not actions:
            continue
        title = "options" if group.title in ("options", "optional arguments") else group.title
        lines += [f"**{title}**", "", "| option | meaning |", "|---|---|"]
        for action in actions:
            help_text = (action.help or "") % {"default": action.default, "prog": parser.prog}
            lines.append(f"| `{_invocation(action)}` | {_cell(help_text)} |")
        lines.append("")
    return lines


def markdown() -> str:
    """The reference of every command: its description, usage and a table of options per group."""
    parser = build_parser()
    summaries = _summaries(parser)
    lines = [
        "The commands, as `crosscheck --help` lists them:",
        "",
        "| command | what it does |",
        "|---|---|",
    ]
    lines += [f"| [`{n}`](#crosscheck-{n}) | {_cell(summaries.get(n, ''))} |" for n in subcommands(parser)]
    lines += ["", "```text", EPILOG, "```", ""]
    lines += ["Every command takes `-h`/`--help`; `crosscheck --version` prints the version.", ""]
    for name, sub in subcommands(parser).items():
        lines += _command(name, sub, summaries.get(name, ""))
    return "\n".join(lines)


def page(text: str) -> str:
    """The page ``text`` with what follows ``MARKER`` made again from the parser (``ValueError``: the
    page has no marker)."""
    head, found, _ = text.partition(MARKER)
    if not found:
        raise ValueError(f"the page has no `{MARKER}`: nothing marks where the reference goes.")
    return f"{head}{MARKER}\n\n{markdown()}\n"


if __name__ == "__main__":  # python -m crosscheck._cli.reference [PATH]: the page written again
    target = Path(sys.argv[1] if len(sys.argv) > 1 else PAGE)
    target.write_text(page(target.read_text()))
