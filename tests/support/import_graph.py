"""The import graph of a package, every import counted (module level, in a function, under
``TYPE_CHECKING``), and its circles (strongly connected components of more than one module)."""

from __future__ import annotations

import ast
from pathlib import Path


def graph(root: Path, package: str = "crosscheck") -> dict[str, set[str]]:
    """Module name -> the package's modules it imports, from the sources under ``root / package``."""
    modules = {}
    for path in (root / package).rglob("*.py"):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    edges: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                    here = here[: len(here) - (node.level - 1)]
                    base = ".".join([*here, base] if base else here)
                found = [base] + [f"{base}.{a.name}" for a in node.names]
            else:
                continue
            edges[name] |= {f for f in found if f in modules and f != name}
    return edges


def circles(edges: dict[str, set[str]], within: str = "") -> list[list[str]]:
    """The circles among the modules whose names start with ``within`` (Tarjan's algorithm)."""
    nodes = [m for m in edges if m.startswith(within)]
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges[v]:
            if not w.startswith(within):
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in nodes:
        if v not in index:
            visit(v)
    return sorted(out)
