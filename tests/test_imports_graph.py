"""No import circle in ``crosscheck/``: every module's imports, function-level ones too, form no cycle.

A circle between two modules means neither can be read, tested or moved without the other; hiding one
of its imports inside a function (or under ``TYPE_CHECKING``) leaves the circle in the design. So the
graph is built from the source with ``ast``, every ``import`` and ``from ... import`` wherever it sits
(a function, a method, an ``if TYPE_CHECKING:`` block), relative imports resolved, and an import of a
package's submodule (``from crosscheck._workloads.port.mapping import table``) counted as an import of both
the package and the submodule. Its strongly connected components (Tarjan's algorithm) must all be single
modules. import-linter's contracts (``pyproject.toml``) keep the layers between folders; this keeps the
rooms inside them.

An import by string is an import too: a string constant that names a module of the package
(``"crosscheck._workloads.port.judge.workload:PortWorkload"``, for ``importlib``), or an f-string that
starts with one (``f"crosscheck._workloads.train.{side}_steps"``: every module under that prefix), is
an edge like any other. The package imports by string only where a process boundary or a layer makes it
honest (``STRING_IMPORTS``), and nowhere else.
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest
from paths import ROOT

PACKAGE = "crosscheck"


def modules(root: Path, package: str = PACKAGE) -> dict[str, Path]:
    """Every module of ``package`` under ``root`` by dotted name (a package by its own name)."""
    found = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _imported(name: str, path: Path, node: ast.Import | ast.ImportFrom) -> list[str]:
    """The dotted names ``node`` (in module ``name`` at ``path``) may import: a ``from`` import's module,
    and each of its names as a submodule."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:  # relative: from the module's package (a package's own __init__ is its package)
        parts = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        parts = parts[: len(parts) - (node.level - 1)]
        base = ".".join([*parts, base] if base else parts)
    return [base, *(f"{base}.{alias.name}" for alias in node.names)]


#: The imports by string the package keeps, module -> the modules it names, each for a reason that a
#: static import cannot serve.
#: (The worker's job, ``"crosscheck._engine.execute:job"``, names its own module: a worker process
#: imports it by name across a process boundary, and it is no edge.)
STRING_IMPORTS = {
    # The public names of the layer above the engine (``crosscheck.check_blocks``), imported when first
    # asked for: ``crosscheck.testing`` imports the package and may not reach the sweep.
    "crosscheck": {"crosscheck._sweep.blocks"},
    # A contained run's report crosses the process boundary as data; the parent rebuilds each section
    # from its render function's module, a workload's (only a workload hands a section over): up from
    # the reports' layer, where a static import may not reach. Any workload module may be named.
    "crosscheck._report.wire": {m for m in modules(ROOT) if m.startswith("crosscheck._workloads.")},
}


def _named(node: ast.AST, found: dict[str, Path], package: str) -> set[str]:
    """The modules of the package a string constant (``module`` or ``module:attribute``), or an
    f-string that starts with a module path, names."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        module = node.value.partition(":")[0]
        return {module} if module in found and module.startswith(package + ".") else set()
    if isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[0], ast.Constant):
        prefix = str(node.values[0].value)
        if prefix.startswith(package + "."):
            return {m for m in found if m.startswith(prefix)}
    return set()


def graph(root: Path, package: str = PACKAGE, *, strings: bool = True) -> dict[str, set[str]]:
    """Module -> the modules of ``package`` it imports, anywhere in its source (with ``strings``: by
    string too, ``_named``)."""
    found = modules(root, package)
    edges: dict[str, set[str]] = {name: set() for name in found}
    for name, path in found.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                edges[name].update(t for t in _imported(name, path, node) if t in found and t != name)
            elif strings:
                edges[name].update(t for t in _named(node, found, package) if t != name)
    return edges


def string_imports(root: Path, package: str = PACKAGE) -> dict[str, set[str]]:
    """Module -> the modules it names by string only (``graph`` with strings, less without)."""
    with_strings, plain = graph(root, package), graph(root, package, strings=False)
    found = {m: with_strings[m] - plain[m] for m in with_strings}
    return {m: named for m, named in found.items() if named}


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module, each sorted (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    out.append(sorted(component))
    return sorted(out)


def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, source in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source), encoding="utf-8")
    return tmp_path


def test_the_guard_finds_a_circle_through_a_function_level_and_a_relative_import(tmp_path):
    root = _package(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "from pkg.b import f\n",
            "pkg/b.py": "def f():\n    from . import c\n",
            "pkg/c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.a import x\n",
            "pkg/d.py": "import pkg.a\n",  # imports the circle, is not part of it
        },
    )
    assert circles(graph(root, "pkg")) == [["pkg.a", "pkg.b", "pkg.c"]]


def test_the_guard_counts_a_package_and_its_submodule(tmp_path):
    root = _package(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/sub/__init__.py": "",
            "pkg/sub/mod.py": "import os\n",  # outside the package: no edge
            "pkg/other.py": "from .sub import mod\n",  # the package's __init__ and its submodule
            "pkg/top.py": "from pkg import other\n",
        },
    )
    edges = graph(root, "pkg")
    assert edges["pkg.other"] == {"pkg.sub", "pkg.sub.mod"}
    assert edges["pkg.top"] == {"pkg", "pkg.other"}
    assert edges["pkg.sub.mod"] == set()
    assert circles(edges) == []


def test_the_guard_sees_the_package():
    edges = graph(ROOT)
    assert "crosscheck._workloads.registry" in edges
    assert "crosscheck._workloads.model.declare" in edges["crosscheck._workloads.registry"]


def test_the_package_has_no_import_circle():
    found = circles(graph(ROOT))
    assert not found, "import circles (strongly connected components):\n" + "\n".join(
        " <-> ".join(component) for component in found
    )


def test_the_guard_sees_a_circle_through_an_import_by_string(tmp_path):
    root = _package(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/declare.py": 'VIEW = "pkg.view:View"\n',  # named, imported later by importlib
            "pkg/view.py": "from pkg.declare import VIEW\n",
            "pkg/steps.py": 'def load(side):\n    return f"pkg.sides.{side}_steps"\n',
            "pkg/sides/__init__.py": "",
            "pkg/sides/jax_steps.py": "from pkg import steps\n",
            "pkg/doc.py": '"""pkg.view is named in a docstring: no edge."""\n',
        },
    )
    assert circles(graph(root, "pkg")) == [
        ["pkg.declare", "pkg.view"],
        ["pkg.sides.jax_steps", "pkg.steps"],
    ]
    assert circles(graph(root, "pkg", strings=False)) == []
    assert string_imports(root, "pkg") == {"pkg.declare": {"pkg.view"}, "pkg.steps": {"pkg.sides.jax_steps"}}


def test_the_package_imports_by_string_only_where_a_boundary_makes_it_honest():
    found = string_imports(ROOT)
    assert found == STRING_IMPORTS, (
        "imports by string (module -> what it names); import statically, at function level where the "
        f"import must wait: {found}"
    )


def reexports(root: Path, package: str = PACKAGE) -> dict[str, list[str]]:
    """Module -> the names it imports only to hand on (``from home import name as name``), outside a
    package's ``__init__.py``, where the public front re-exports."""
    found: dict[str, list[str]] = {}
    for name, path in modules(root, package).items():
        if path.name == "__init__.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if isinstance(node, ast.ImportFrom):
                found.setdefault(name, []).extend(a.name for a in node.names if a.asname == a.name)
    return {module: names for module, names in found.items() if names}


def test_the_guard_sees_a_reexport(tmp_path):
    root = _package(
        tmp_path,
        {
            "pkg/__init__.py": "from pkg.verdict import judge as judge\n",  # the front: allowed
            "pkg/verdict.py": "def judge():\n    pass\n",
            "pkg/localize.py": "from pkg.verdict import judge as judge\nfrom pkg import verdict as v\n",
        },
    )
    assert reexports(root, "pkg") == {"pkg.localize": ["judge"]}


def test_a_name_has_one_address_no_reexport_outside_an_init():
    # A name handed on from a second module has two addresses (which one is its home?): import it
    # from its home.
    assert reexports(ROOT) == {}


def homes(root: Path, name: str, package: str = PACKAGE) -> list[str]:
    """The modules that define ``name`` at their top (a class, or a name assigned: a type alias)."""
    found = []
    for module, path in modules(root, package).items():
        for node in ast.parse(path.read_text(encoding="utf-8"), filename=str(path)).body:
            targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
            named = [getattr(t, "id", None) for t in targets] + [getattr(node, "name", None)]
            if isinstance(node, (ast.ClassDef, ast.Assign, ast.AnnAssign)) and name in named:
                found.append(module)
    return sorted(found)


@pytest.mark.parametrize(
    ("name", "home"),
    [
        # Everything one run needs, decided before a backend runs (the oracle's choice is a Differencing).
        ("Plan", "crosscheck._engine.plan"),
        ("Differencing", "crosscheck._workloads.model.oracle.function"),
        # What the model judge found for one candidate (a module's call is a ModuleCall; a sweep's case
        # a CaseRecord).
        ("Record", "crosscheck._workloads.model.findings"),
        ("ModuleCall", "crosscheck._workloads.port.sides.torch_side"),
        ("CaseRecord", "crosscheck._sweep.task"),
        # What a model candidate is compared with, per parameter (one question's words in its verdict
        # are a Clause).
        ("Answer", "crosscheck._workloads.model.compare"),
    ],
    ids=["Plan", "Differencing", "Record", "ModuleCall", "CaseRecord", "Answer"],
)
def test_a_name_of_two_meanings_is_two_names(name, home):
    assert homes(ROOT, name) == [home]


def annotations_of(root: Path, name: str, folders: tuple[str, ...], package: str = PACKAGE) -> dict[str, str]:
    """``module:line`` -> the annotation of each parameter and each field named ``name`` in the modules
    under ``folders`` of the package."""
    found = {}
    for module, path in modules(root, package).items():
        if not module.startswith(tuple(f"{package}.{folder}" for folder in folders)):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if isinstance(node, ast.arg) and node.arg == name and node.annotation is not None:
                found[f"{module}:{node.lineno}"] = ast.unparse(node.annotation)
            elif isinstance(node, ast.AnnAssign) and getattr(node.target, "id", None) == name:
                found[f"{module}:{node.lineno}"] = ast.unparse(node.annotation)
    return found


def test_the_guard_reads_a_parameter_and_a_field(tmp_path):
    root = _package(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/inner/__init__.py": "",
            "pkg/inner/plan.py": "class Plan:\n    options: Options\n\ndef judge(options: dict): ...\n",
            "pkg/outer.py": "def render(options: dict) -> None: ...\n",  # outside the folders asked
        },
    )
    assert annotations_of(root, "options", ("inner",), "pkg") == {
        "pkg.inner.plan:2": "Options",
        "pkg.inner.plan:4": "dict",
    }


@pytest.mark.parametrize(
    ("name", "record", "folders"),
    [
        # One name per meaning. How a run judges (``Options``: the records as made) travels from the
        # plan through every workload's judge; the workload's own options, which configure it, are a
        # request's ``workload_options``.
        ("options", "Options", ("_engine", "_workloads")),
    ],
    ids=["options"],
)
def test_a_field_named_for_a_record_holds_that_record(name, record, folders):
    found = annotations_of(ROOT, name, folders)
    other = {where: annotation for where, annotation in found.items() if record not in annotation}
    assert found and not other, f"`{name}` of another meaning than `{record}` (give it its own name): {other}"
