"""One screening vocabulary (``crosscheck._compare.screening``), spoken by the three algorithms: the
stack's gradient and HVP screening and a workload's tensors. A block's directions, their counts and
worst ratio, the blocks escalated to their entries, the coverage in words and the report's row."""

from __future__ import annotations

import ast

import numpy as np
import pytest
from paths import ROOT

from crosscheck._compare import screening


def test_a_block_s_directions():
    found = screening.Directions(
        diff=np.array([0.0, 3.0, 1.0, 5.0]),
        tol=np.array([0.0, 1.0, 2.0, 1.0]),
        judged=np.array([True, True, True, False]),
        failing=np.array([False, True, False, False]),
    )
    assert np.array_equal(found.ratio, [0.0, 3.0, 0.5, 5.0])  # 0 / 0 is 0
    assert found.worst == 1  # the worst judged direction: 3, not the unjudged 5
    assert (found.mismatched, found.unjudgeable, found.agrees) == (1, 1, False)
    row = {"diff": found.diff, "tol": found.tol, "judged": found.judged, "failing": found.failing, "x": 1}
    assert screening.Directions.of(row) == found
    calm = screening.Directions(np.ones(2), np.ones(2), np.array([True, False]), np.zeros(2, bool))
    assert calm.agrees
    unjudged = screening.Directions(np.zeros(2), np.ones(2), np.zeros(2, bool), np.zeros(2, bool))
    assert not unjudged.agrees  # nothing judged: nothing agreed


def test_a_direction_fails_beyond_its_tolerance():
    diff, tol = np.array([1.0, 2.0, np.nan, 9.0]), np.array([1.0, 1.0, 1.0, 1.0])
    judged = np.array([True, True, True, False])
    assert screening.failing(diff, tol, judged).tolist() == [False, True, True, False]


def test_blocks_escalated_to_their_entries():
    failing = np.array([[False, False], [True, False], [False, False], [True, True]])
    assert screening.escalated(failing) == [1, 3]
    assert screening.escalated(failing, {2}) == [1, 2, 3]
    assert screening.escalated(np.zeros((2, 2), bool)) == []


def test_the_coverage_and_the_row_say_it_as_reports_always_have():
    said = screening.coverage(8, "layer", 4, [0, 5])
    assert said == "screened: 8 layers x 4 random directions; layers checked entry by entry: [0, 5]"
    none = screening.coverage(3, "layer", 1, [])
    assert none == "screened: 3 layers x 1 random directions; layers checked entry by entry: none"
    assert f"{none}: {screening.AGREES}".endswith("none: every direction agrees")
    found = screening.Directions(np.array([0.5, 2.0]), np.ones(2), np.ones(2, bool), np.array([False, True]))
    row = screening.row("layer", 3, found, True)
    assert row == {"layer": 3, "directions": 2, "mismatched": 1, "worst_ratio": 2.0, "full_check": True}


ALGORITHMS = (
    "crosscheck/_workloads/stack/judge/screen.py",
    "crosscheck/_workloads/stack/judge/hvp_screen.py",
    "crosscheck/_workloads/model/groups.py",
    "crosscheck/_workloads/model/compare.py",
)
#: Words that only the vocabulary says (in code: a docstring may use them).
WORDS = ("every direction agrees", "checked entry by entry", "random directions;")


def _strings(tree: ast.AST) -> list[str]:
    """The string literals of a module's code, its docstrings left out."""
    docs = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        n.value
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs
    ]


@pytest.mark.parametrize("module", ALGORITHMS, ids=[m.rsplit("/", 1)[1] for m in ALGORITHMS])
def test_every_screening_algorithm_speaks_the_one_vocabulary(module):
    tree = ast.parse((ROOT / module).read_text(encoding="utf-8"))
    imported = {
        a.name
        for n in ast.walk(tree)
        if isinstance(n, ast.ImportFrom) and n.module == "crosscheck._compare"
        for a in n.names
    }
    assert "screening" in imported, f"{module} does not import crosscheck._compare.screening"
    said = [w for s in _strings(tree) for w in WORDS if w in s]
    assert said == [], f"{module} says {said} itself"


def test_the_check_finds_words_said_in_code():
    tree = ast.parse('"""every direction agrees, in a docstring"""\nx = f"{a}: every direction agrees"\n')
    assert _strings(tree) == [": every direction agrees"]
