"""The count of functions that return ``Any`` does not grow.

A function annotated ``-> Any`` hands its caller nothing mypy can check: every use of what it returns
goes unchecked, and the next function that passes it on says ``Any`` too. Where a protocol or a record
exists (``EngineWorkload``, ``Judge``, ``Outcome``, ``Report``), the signature that returns one says so.
Some returns are ``Any`` honestly (a framework's array where the framework is not installed for mypy, a
user's function's result); the count of them is held at ``CEILING``.

To lower it: give a function its real return type (a protocol, a record, a ``TypeVar``, a union), run
``mypy``, and lower ``CEILING`` by as many in the same change (``returns_any`` lists them by module). A
new ``-> Any`` is refused: type it, or type another one in the same change.
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

from paths import ROOT

PACKAGES = ("crosscheck", "backends")
#: Functions and methods annotated ``-> Any`` in ``PACKAGES`` (never raised: lowered as they are typed).
CEILING = 114


def returns_any(root: Path, packages: tuple[str, ...] = PACKAGES) -> dict[str, list[str]]:
    """Module path -> the functions and methods in it annotated to return ``Any`` (``typing.Any`` too),
    nested ones included, read from the source with ``ast``."""
    found: dict[str, list[str]] = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            names = [
                node.name
                for node in ast.walk(tree)
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                and node.returns is not None
                and ast.unparse(node.returns) in ("Any", "typing.Any")
            ]
            if names:
                found[path.relative_to(root).as_posix()] = names
    return found


def test_the_count_sees_every_function_that_returns_any(tmp_path):
    source = """
        import typing
        from typing import Any

        def one() -> Any: ...
        def two() -> typing.Any: ...
        def typed() -> int: ...
        def unannotated(): ...
        def wider() -> Any | None: ...  # not Any: None is checked

        class Box:
            def method(self) -> Any:
                def nested() -> Any: ...
    """
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "mod.py").write_text(textwrap.dedent(source), encoding="utf-8")
    assert returns_any(tmp_path, ("pkg",)) == {"pkg/mod.py": ["one", "two", "method", "nested"]}


def test_no_new_function_returns_any():
    found = returns_any(ROOT)
    count = sum(len(names) for names in found.values())
    assert count <= CEILING, (
        f"{count} functions return `Any`, more than the {CEILING} allowed: give the new one its real "
        "return type (a protocol or a record where one exists). By module:\n"
        + "\n".join(f"  {module}: {', '.join(names)}" for module, names in sorted(found.items()))
    )
