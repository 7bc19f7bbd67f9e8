"""Size guards: no module of crosscheck or its adapters over 400 lines, no function over 60.

A long module or function is where two concerns have grown together; the limits keep each one small
enough to read in one sitting (style.md items 7 and 13). The layers themselves are checked by
import-linter (``nox -s lint``).
"""

from __future__ import annotations

import ast
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("crosscheck", "backends")
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60


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


def _function_lines(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Lines from the first decorator (or ``def``) to the last line of the body, docstring included."""
    first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
    return (node.end_lineno or node.lineno) - first + 1


def offenders() -> list[str]:
    """``path (N lines)`` and ``path: function (N lines)`` for every module or function over its limit."""
    found = []
    for path in _modules():
        source = path.read_text(encoding="utf-8")
        name = path.relative_to(ROOT).as_posix()
        lines = len(source.splitlines())
        if lines > MAX_MODULE_LINES:
            found.append(f"{name} ({lines} lines)")
        for qualname, node in _functions(ast.parse(source, filename=name)):
            length = _function_lines(node)
            if length > MAX_FUNCTION_LINES:
                found.append(f"{name}: {qualname} ({length} lines)")
    return found


def test_the_guard_sees_the_packages():
    names = {p.relative_to(ROOT).as_posix() for p in _modules()}
    assert {"crosscheck/__init__.py", "backends/__init__.py"} <= names


def test_the_guard_measures_functions_and_methods():
    source = textwrap.dedent(
        """
        class A:
            @staticmethod
            def f():
                def g():
                    pass
                return g
        """
    )
    found = {name: _function_lines(node) for name, node in _functions(ast.parse(source))}
    assert found == {"A.f": 5, "A.f.g": 2}  # a decorator counts; a nested function counts for both


def test_modules_and_functions_stay_small():
    found = offenders()
    if found:
        limits = f"over {MAX_MODULE_LINES} lines a module or {MAX_FUNCTION_LINES} a function"
        pytest.fail(f"{len(found)} over the limits ({limits}):\n" + "\n".join(found), pytrace=False)
