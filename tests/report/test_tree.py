"""The terminal report of a model of real size: a verdict line at the top, the failing rows first, the
module tree collapsed where everything agrees; a small report row by row; the JSON keeps everything."""

from __future__ import annotations

import io

import pytest

from crosscheck._compare.record import Comparison
from crosscheck._report.report import BackendResult, Report
from crosscheck._report.table import summary
from crosscheck._report.tree import SUMMARY_ROWS, Group, arrange

#: 50 blocks of 4 tensors: a port of 200 parameter tensors.
NAMES = [
    f"blocks.{i}.{m}.{p}"
    for i in range(50)
    for m, p in (("fc", "weight"), ("fc", "bias"), ("norm", "weight"), ("norm", "bias"))
]


def _comparison(name, *, passed=True, module=None):
    return Comparison(
        module=module,
        backend="jax",
        reference="torch",
        passed=passed,
        status="ok" if passed else "mismatch",
        total=16,
        parameter=name,
        mismatched=0 if passed else 3,
        judged=16,
        max_abs_diff=1e-7 if passed else 0.5,
        max_rel_diff=1e-6 if passed else 0.9,
        worst_index=(0, 1),
        worst_terms={"rounding": 1e-6},
        decided_by="rounding",
        message=f"Mismatched elements: 3 / 16 at `{name}`",
    )


def _report(failing=()):
    backends = {
        "torch": BackendResult("torch", "ok", role="reference", dtype="float32", seconds=0.1),
        "jax": BackendResult("jax", "ok", dtype="float32", seconds=0.2),
    }
    comparisons = [_comparison(n, passed=n not in failing) for n in NAMES]
    return Report(
        case={"workload": "deep", "dtype": "float32", "parameters": {n: [4] for n in NAMES}},
        backends=backends,
        comparisons=comparisons,
        reference="torch",
    )


def _lines(report, width=160):
    from rich.console import Console

    out = io.StringIO()
    report.render(Console(file=out, width=width, force_terminal=False, color_system=None))
    return out.getvalue().splitlines()


def test_a_healthy_model_of_200_tensors_is_a_few_lines():
    lines = _lines(_report())
    assert lines[0].startswith("PASSED: 1 candidate(s) agree with `torch` on all 200 parameters")
    assert lines[-1] == lines[0]
    assert len(lines) < 20, "\n".join(lines)
    assert any("blocks (200 rows)" in line for line in lines)
    assert not any("blocks.3.fc.weight" in line for line in lines)
    assert "parameters: 200 arrays" in "\n".join(lines[:3])  # the title counts them


@pytest.mark.parametrize(
    ("parameters", "outputs", "on"),
    [
        (
            NAMES[:17],
            NAMES[17:29],
            "on all 17 parameters and 12 other rows (`blocks.4.fc.bias`, `blocks.4.norm.weight` and 10 more)",
        ),
        (NAMES[:1], NAMES[1:2], "on its 1 parameter and 1 other row (`blocks.0.fc.bias`)"),
        (NAMES[:17], [], "on all 17 parameters"),
    ],
    ids=["rows-the-case-does-not-list", "one-of-each", "parameters-only"],
)
def test_the_passed_line_counts_parameters_only(parameters, outputs, on):
    # A port's module outputs are rows of the table, not parameters: "29 parameters" for a model of 17.
    report = _report()
    report.comparisons[:] = [_comparison(n) for n in [*parameters, *outputs]]
    report.case["parameters"] = {n: [4] for n in parameters}
    assert summary(report) == f"1 candidate(s) agree with `torch` {on}"


def _outputs(modules, *, passed=True):
    """A port's module-output rows (``conv1 (output)``; the model's own output: module "")."""
    return [_comparison(f"{m or '(model)'} (output)", passed=passed, module=m) for m in modules]


def test_the_passed_line_names_module_outputs_as_module_outputs():
    report = _report()
    report.comparisons[:] = [*_outputs(["conv1", "bn1", "fc", ""]), *map(_comparison, NAMES[:6])]
    report.case["parameters"] = {n: [4] for n in NAMES[:6]}
    assert summary(report) == (
        "1 candidate(s) agree with `torch` on all 6 parameters "
        "and 4 module outputs (`conv1`, `bn1` and 2 more)"
    )


@pytest.mark.parametrize(
    ("modules", "parameters", "where"),
    [
        (
            ["conv1", "bn1", "fc", ""],
            NAMES[:5],
            "at module outputs `conv1`, `bn1`, `fc`, `(model)`, and at parameters `blocks.0.fc.weight`, "
            "`blocks.0.fc.bias`, `blocks.0.norm.weight` and 2 more",
        ),
        (["h.0.ln_1"], [], "at module output `h.0.ln_1`"),
        ([], NAMES[:2], "at parameters `blocks.0.fc.weight`, `blocks.0.fc.bias`"),
    ],
    ids=["both", "one-module-output", "parameters-only"],
)
def test_the_failed_line_names_module_outputs_apart_from_parameters(modules, parameters, where):
    # A module's output is not a parameter: "at parameters `conv1 (output)`, ..." said it was.
    report = _report()
    failing = [*_outputs(modules, passed=False), *(_comparison(n, passed=False) for n in parameters)]
    report.comparisons[:] = [*failing, _comparison(NAMES[-1])]
    assert report.problems == [f"`jax` disagrees with `torch` {where}"]


def test_a_failing_row_comes_first_and_opens_its_module_only():
    failed = "blocks.7.norm.weight"
    lines = _lines(_report(failing={failed}))
    assert lines[0].startswith("FAILED: `jax` disagrees with `torch` at parameter `blocks.7.norm.weight`")
    rows = [line for line in lines if "│" in line and ("blocks" in line)]
    labels = [next(cell.strip() for cell in row.split("│")[2:3]) for row in rows]
    assert labels == [
        failed,
        "blocks.0-6 (28 rows)",
        "blocks.7.fc (2 rows)",
        "blocks.7.norm.bias (1 row)",
        "blocks.8-49 (168 rows)",
    ]
    assert "FAIL" in rows[0] and all("ok" in row for row in rows[1:])
    assert len(lines) < 30, "\n".join(lines)


def test_many_failing_rows_are_grouped_too_and_their_messages_counted():
    failed = set(NAMES[100:])  # a bug at block 25: every tensor after it differs
    lines = _lines(_report(failing=failed))
    text = "\n".join(lines)
    rows = [line for line in lines if "│" in line and "blocks" in line]
    assert [r.split("│")[2].strip() for r in rows[10:]] == [
        "blocks.25-49 (90 rows)",
        "blocks.0-24 (100 rows)",
    ]
    assert all("FAIL" in r for r in rows[:11]) and "ok" in rows[11]  # the first ten in full, then groups
    assert len(lines) < 40, text
    assert text.count("Mismatched elements") == 5
    assert "... and 95 more failing rows' messages (the JSON report has each)" in text


def test_the_json_keeps_every_row():
    data = _report(failing={NAMES[5]}).to_dict()
    assert [c["parameter"] for c in data["comparisons"]] == NAMES


def test_a_small_report_stays_row_by_row():
    small = _report()
    small = Report(
        case=small.case,
        backends=small.backends,
        comparisons=small.comparisons[:SUMMARY_ROWS],
        reference="torch",
    )
    lines = _lines(small)
    assert lines[-1].startswith("PASSED") and not lines[0].startswith("PASSED")
    assert sum("blocks." in line and "│" in line for line in lines) == SUMMARY_ROWS


@pytest.mark.parametrize(
    ("names", "labels"),
    [
        (["a.0.w", "a.1.w", "a.2.w", "b.w"], ["a", "b"]),  # the root opened, agreeing modules one row each
        (["0.w", "1.w", "2.w"], ["0-2"]),
        (["m (output)", "m.0.w", "m.1.w!"], ["m.1.w", "m itself", "m.0"]),  # failing first
    ],
)
def test_the_tree_collapses_where_everything_agrees(names, labels):
    comparisons = [_comparison(n.rstrip("!"), passed=not n.endswith("!")) for n in names]
    shown = [c.label if isinstance(c, Group) else c.parameter for c in arrange(comparisons)]
    assert shown == labels
