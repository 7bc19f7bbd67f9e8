"""MkDocs hook: the command-line reference, made again from crosscheck's parser when the site builds.

``docs/reference/cli.md`` holds the reference after a marker, committed (``python -m
crosscheck._cli.reference`` writes it; a test keeps it in sync); this hook replaces what follows the
marker with ``crosscheck._cli.reference.markdown()``, so the site says what the installed parser accepts.
"""

from __future__ import annotations


def on_page_markdown(markdown: str, page, config, files) -> str:  # MkDocs' hook signature
    from crosscheck._cli.reference import MARKER
    from crosscheck._cli.reference import page as generated

    return generated(markdown) if MARKER in markdown else markdown
