"""The count of functions that return ``Any`` does not grow.

A function annotated ``-> Any`` hands its caller nothing mypy can check: every use of what it returns
goes unchecked, and the next function that passes it on says ``Any`` too. Where a protocol or a record
exists (``EngineWorkload``, ``Judge``, ``Outcome``, ``Report``), the signature that returns one says so.
Some returns are ``Any`` honestly (a framework's array where the framework is not installed for mypy, a
user's function's result); the count of them is held at ``CEILING``.

To lower it: give a function its real return type (a protocol, a record, a ``TypeVar``, a union), run
``mypy``, and lower ``CEILING`` by as many in the same change (``returns_any`` lists them by module). A
new ``-> Any`` is refused: type it, or type another one in the same change.

A value whose type mypy cannot see (a framework's array, data that crossed a process) is named by an
alias of ``Any`` that says why (``FrameworkArray``, ``Parsed``), declared in one module, ``ALIASES``
(Equinox's ``PyTree``, chex's ``pytypes``): an alias of ``Any`` anywhere else is refused, so that every
seam left unchecked is listed there, with its reason.
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

from paths import ROOT

PACKAGES = ("crosscheck", "backends")
#: Functions and methods annotated ``-> Any`` in ``PACKAGES`` (never raised: lowered as they are typed).
CEILING = 37
#: The one module that declares aliases of ``Any``.
ALIASES = "crosscheck/_types.py"


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


def any_aliases(root: Path, packages: tuple[str, ...] = PACKAGES) -> dict[str, list[str]]:
    """Module path -> the names it declares, at its top level, as an alias of ``Any`` (``X = Any``,
    ``X: TypeAlias = Any``, ``typing.Any`` too)."""
    found: dict[str, list[str]] = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            names = [
                target.id
                for node in tree.body
                if isinstance(node, (ast.Assign, ast.AnnAssign))
                and node.value is not None
                and ast.unparse(node.value) in ("Any", "typing.Any")
                for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
                if isinstance(target, ast.Name)
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


def test_the_alias_search_sees_every_alias_of_any(tmp_path):
    source = """
        import typing
        from typing import Any, TypeAlias

        Plain = Any
        Marked: TypeAlias = Any
        Spelled = typing.Any
        Precise: TypeAlias = int | None
        Annotated: Any = None  # a variable of type Any, not an alias

        def f():
            Local = Any  # not at the top level: no alias a signature can name
    """
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "mod.py").write_text(textwrap.dedent(source), encoding="utf-8")
    assert any_aliases(tmp_path, ("pkg",)) == {"pkg/mod.py": ["Plain", "Marked", "Spelled"]}


def test_aliases_of_any_are_declared_in_one_module():
    found = {module: names for module, names in any_aliases(ROOT).items() if module != ALIASES}
    assert not found, (
        f"aliases of `Any` outside {ALIASES}: declare them there, each with why mypy cannot check it "
        f"(or give the seam a precise type): {found}"
    )
    assert any_aliases(ROOT).get(ALIASES), f"{ALIASES} declares no alias of `Any`: the test looks in vain"
