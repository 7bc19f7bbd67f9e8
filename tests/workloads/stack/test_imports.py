"""The stack's modules import one another without a circle, every import counted (a function-level or
``TYPE_CHECKING`` import too): the judges and their screening meet in ``judge/answers.py`` and a
``Protocol`` of the judge, the rounding model and the kinks in ``forward.py``."""

from __future__ import annotations

from import_graph import circles, graph
from paths import ROOT


def test_the_stack_and_the_comparison_have_no_import_circle():
    edges = graph(ROOT)
    assert "crosscheck._workloads.stack.judge.screen" in edges
    assert circles(edges, "crosscheck._workloads.stack") == []
    assert circles(edges, "crosscheck._compare") == []


def test_the_check_sees_a_circle_through_a_function_level_import(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from pkg import b\n")
    (package / "b.py").write_text("def f():\n    from pkg.a import x\n")
    (package / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import a\n"
    )
    edges = graph(tmp_path, "pkg")
    assert "pkg.a" in edges["pkg.c"]  # under TYPE_CHECKING, relative
    assert circles(edges, "pkg") == [["pkg.a", "pkg.b"]]
