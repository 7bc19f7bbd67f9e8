"""MkDocs hook: the command-line reference, generated from crosscheck's parser when the site builds.

``docs/reference/cli.md`` holds the marker below; this hook replaces it with
``crosscheck._cli.reference.markdown()``, so the page always says what the installed parser accepts.
"""

from __future__ import annotations

MARKER = "<!-- the command-line reference, generated from the parser -->"


def on_page_markdown(markdown: str, page, config, files) -> str:  # MkDocs' hook signature
    if MARKER not in markdown:
        return markdown
    from crosscheck._cli.reference import markdown as reference

    return markdown.replace(MARKER, reference())
