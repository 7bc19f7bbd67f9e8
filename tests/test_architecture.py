"""Size guards that measure concerns: statements per module and per function, lines per module, and no
``# fmt: skip``.

A long module or function is where two concerns have grown together; the limits keep each one small
enough to read in one sitting (style.md items 7 and 13). The measure is the number of statements (the
AST's statement nodes: a ``def``, an assignment, a ``return``, an ``if`` and each statement in its
branches; docstrings do not count), not raw lines: a statement is the same one whatever the formatter
makes of it, so a module cannot pass by squeezing lines together, and a long docstring or a table laid
out one entry a line costs nothing. A function counts the statements of the functions nested in it.

The limits sit just above the largest of today's modules (about 225 statements, one concern each) and
functions (about 40): a module that grows a second concern of any size fails, and so does a function
doing two things. A module is also held to ``MAX_MODULE_LINES`` lines, docstrings and comments
included: what a newcomer reads in one sitting (a module whose prose outgrows its code has become two
topics too). ``# fmt: skip`` is allowed nowhere in the package or its adapters outside the short
``ALLOWED_SKIPS`` (each entry with its reason), so the code is what the formatter makes of it. The
layers themselves are checked by import-linter (``nox -s lint``).
"""

from __future__ import annotations

import ast
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from paths import ROOT

PACKAGES = ("crosscheck", "backends")
MAX_MODULE_STATEMENTS = 250
MAX_FUNCTION_STATEMENTS = 40
MAX_MODULE_LINES = 400
#: Modules where a ``# fmt: skip`` is allowed, each with why (a table whose layout is its meaning, say).
ALLOWED_SKIPS: dict[str, str] = {}
SKIP = "# fmt: " + "skip"  # spelled in two so this file does not hold the marker it looks for


def _modules() -> list[Path]:
    return sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py"))


def _functions(tree: ast.AST) -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """Every function and method, with its dotted name inside the module (``Class.method``)."""

    def walk(node: ast.AST, prefix: str) -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield prefix + child.name, child
                yield from walk(child, f"{prefix}{child.name}.")
            elif isinstance(child, ast.ClassDef):
                yield from walk(child, f"{prefix}{child.name}.")
            else:
                yield from walk(child, prefix)

    return walk(tree, "")


def _is_docstring(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    )


def statements(node: ast.AST) -> int:
    """The statements in ``node`` (itself included when it is one), docstrings and bare strings left out."""
    return sum(1 for n in ast.walk(node) if isinstance(n, ast.stmt) and not _is_docstring(n))


def offenders() -> list[str]:
    """``path (N statements)``, ``path (N lines)`` and ``path: function (N statements)`` for each one over
    its limit."""
    found = []
    for path in _modules():
        name = path.relative_to(ROOT).as_posix()
        text = path.read_text(encoding="utf-8")
        tree = ast.parse(text, filename=name)
        count = statements(tree)
        if count > MAX_MODULE_STATEMENTS:
            found.append(f"{name} ({count} statements)")
        lines = len(text.splitlines())
        if lines > MAX_MODULE_LINES:
            found.append(f"{name} ({lines} lines)")
        for qualname, node in _functions(tree):
            count = statements(node)
            if count > MAX_FUNCTION_STATEMENTS:
                found.append(f"{name}: {qualname} ({count} statements)")
    return found


def format_skips() -> list[str]:
    """``path:line: code`` of every ``# fmt: skip`` in a module ``ALLOWED_SKIPS`` does not list."""
    found = []
    for path in _modules():
        name = path.relative_to(ROOT).as_posix()
        if name in ALLOWED_SKIPS:
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            if SKIP in line:
                found.append(f"{name}:{number}: {line.strip()}")
    return found


def test_the_guard_sees_the_packages():
    names = {p.relative_to(ROOT).as_posix() for p in _modules()}
    assert {"crosscheck/__init__.py", "backends/__init__.py"} <= names


def test_the_guard_measures_functions_and_methods():
    source = textwrap.dedent(
        '''
        """A module docstring: no statement."""
        class A:
            @staticmethod
            def f(x):
                """A docstring: no statement."""
                def g():
                    pass
                if x:
                    return g
                return None
        '''
    )
    tree = ast.parse(source)
    found = {name: statements(node) for name, node in _functions(tree)}
    assert found == {"A.f": 6, "A.f.g": 2}  # def, def g, pass, if, return, return; a nested one counts twice
    assert statements(tree) == 7  # the class, and what is in it


def test_the_guard_counts_statements_not_lines():
    squeezed = "def f(a, b):\n    x = a; y = b; return x + y\n"
    spread = "def f(\n    a,\n    b,\n):\n    x = a\n\n    y = b\n    return (\n        x + y\n    )\n"
    assert statements(ast.parse(squeezed)) == statements(ast.parse(spread)) == 4


def test_the_guard_finds_what_is_over_the_limits(monkeypatch, tmp_path):
    package = tmp_path / "crosscheck"
    package.mkdir()
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_STATEMENTS))
    (package / "long.py").write_text(f"def long():\n{body}\n    return x0\n\n\ndef short():\n    return 1\n")
    (package / "big.py").write_text("\n".join(f"y{i} = {i}" for i in range(MAX_MODULE_STATEMENTS + 1)))
    (package / "skips.py").write_text(f"z = 1\nw = (1,  2)  {SKIP}\n")
    (package / "wordy.py").write_text('"""' + "\n" * MAX_MODULE_LINES + '"""\nv = 1\n')
    monkeypatch.setitem(globals(), "ROOT", tmp_path)
    monkeypatch.setitem(globals(), "PACKAGES", ("crosscheck",))
    assert offenders() == [
        f"crosscheck/big.py ({MAX_MODULE_STATEMENTS + 1} statements)",
        f"crosscheck/long.py: long ({MAX_FUNCTION_STATEMENTS + 2} statements)",
        f"crosscheck/wordy.py ({MAX_MODULE_LINES + 2} lines)",
    ]
    assert [s.split(": ", 1)[0] for s in format_skips()] == ["crosscheck/skips.py:2"]


def test_modules_and_functions_stay_small():
    found = offenders()
    if found:
        limits = (
            f"over {MAX_MODULE_STATEMENTS} statements or {MAX_MODULE_LINES} lines a module, or "
            f"{MAX_FUNCTION_STATEMENTS} statements a function"
        )
        pytest.fail(f"{len(found)} over the limits ({limits}):\n" + "\n".join(found), pytrace=False)


def test_no_format_skips():
    found = format_skips()
    if found:
        message = f"{len(found)} `{SKIP}` (format the code, or list it in ALLOWED_SKIPS with why):\n"
        pytest.fail(message + "\n".join(found), pytrace=False)
