"""Where things are, for a test in any folder: the repository, the tests, the helpers, the plugins."""

from __future__ import annotations

from pathlib import Path

#: The helpers' folder (``tests/support/``): on ``sys.path`` in the tests (``conftest.py``), and on a
#: worker's ``PYTHONPATH``, so that ``planted:...`` and ``hostile:...`` import strings resolve.
SUPPORT = Path(__file__).resolve().parent
#: ``tests/``.
TESTS = SUPPORT.parent
#: The repository's root (``pyproject.toml``, ``docs/``, ``examples/``).
ROOT = TESTS.parent
#: The installable plugin packages the backend tests install (``tests/plugins/``).
PLUGINS = TESTS.joinpath("plugins")
