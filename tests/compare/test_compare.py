"""Comparison knows no workload: a judge hands its term help, its kinks' index width and the split it
wants; the numbers every tolerance is built from are defined once, in ``crosscheck._compare.constants``."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest
from paths import ROOT

from crosscheck._compare import constants, terms
from crosscheck._compare.compare import compare
from crosscheck._compare.record import Kinks, Tolerance


def _kinked() -> tuple[np.ndarray, np.ndarray, Kinks]:
    """A (2, 3) parameter: one entry unjudgeable (kink ``(1, 4)``), one judged on both sides of kink
    ``(0, 2)`` and off on both; kinks indexed by two numbers (a workload's ``(row, unit)``)."""
    reference = np.arange(1.0, 7.0).reshape(2, 3)
    candidate = reference.copy()
    candidate[1, 1] += 1.0
    unjudgeable = np.zeros((2, 3), bool)
    unjudgeable[0, 0] = True
    kink = np.full((2, 3, 2), -1)
    kink[0, 0], kink[1, 1] = (1, 4), (0, 2)
    reason = np.where(unjudgeable, "a kink in reach", "").astype(object)
    alternative = np.full((2, 3), np.nan)
    alternative[1, 1] = reference[1, 1] + 0.5
    return candidate, reference, Kinks(unjudgeable, reason, kink, alternative)


def _compare(candidate, reference, kinks=None, **keywords):
    terms = {"mine": np.full(reference.shape, 1e-9), "slack": np.zeros(reference.shape)}
    tolerance = Tolerance(terms)
    return compare(
        candidate,
        reference,
        tolerance,
        backend="b",
        reference_name="r",
        dtype="float64",
        kinks=kinks,
        **keywords,
    )


def test_a_judge_hands_its_own_term_help_and_shared_terms_need_none():
    reference = np.ones((2, 2))
    c = _compare(reference.copy(), reference, term_help={"mine": "what my rounding can do"})
    assert c.tolerance_sources == {"mine": "what my rounding can do", "slack": terms.TERM_HELP["slack"]}
    assert _compare(reference.copy(), reference).tolerance_sources == {
        "mine": "",
        "slack": terms.TERM_HELP["slack"],
    }


def test_the_kinks_index_is_as_wide_as_the_workload_says():
    candidate, reference, kinks = _kinked()
    c = _compare(candidate, reference, kinks)
    assert kinks.width == 2
    assert c.kinks == [[0, 2], [1, 4]]
    assert c.unjudgeable == 1 and c.two_sided == 1 and c.mismatched == 1
    assert c.worst_entries[0]["index"] == [1, 1] and c.worst_entries[0]["kink"] == [0, 2]
    assert all(entry["kink"] is None for entry in c.worst_entries[1:])


@pytest.mark.parametrize("width", [0, 1, 3], ids=["no-index", "one-number", "three-numbers"])
def test_no_kinks_of_any_width(width):
    reference = np.ones((2, 2))
    c = _compare(reference * 2, reference, Kinks.none(reference.shape, width))
    assert c.kinks == [] and c.mismatched == 4
    assert all(entry["kink"] is None for entry in c.worst_entries)


def test_no_kinks_hold_no_memory_per_entry_and_compare_as_explicit_arrays():
    """``Kinks.none`` for a model's every parameter is views of one value each (issue 38: they were 25
    bytes an entry, kept for the whole run), read-only; a comparison with them is the one with the same
    kinks written out entry by entry."""
    shape = (300, 400)
    none = Kinks.none(shape)
    for array in (none.unjudgeable, none.reason, none.kink, none.alternative):
        assert array.base is not None and array.base.nbytes <= 16 and not array.flags.writeable
        assert 0 in array.strides
    assert none.kink.shape == (*shape, 1) and none.reason[3, 4] == "" and np.isnan(none.alternative[0, 0])
    explicit = Kinks(
        np.zeros(shape, bool), np.full(shape, "", object), np.full((*shape, 1), -1), np.full(shape, np.nan)
    )
    rng = np.random.default_rng(0)
    reference = rng.standard_normal(shape)
    candidate = reference + 1e-3 * rng.standard_normal(shape) * (rng.random(shape) < 0.01)
    views, arrays = _compare(candidate, reference, none), _compare(candidate, reference, explicit)
    assert views.to_dict() == arrays.to_dict() and views.mismatched > 0
    assert views.unjudgeable_reasons == {} and views.kinks == []


def test_the_split_along_the_leading_axis_is_asked_for_and_named_by_the_judge():
    candidate, reference, kinks = _kinked()
    assert _compare(candidate, reference, kinks).per_layer == []
    rows = _compare(candidate, reference, kinks, split="block").per_layer
    assert [row["block"] for row in rows] == [0, 1]
    assert [(row["judged"], row["mismatched"]) for row in rows] == [(2, 0), (3, 1)]
    assert rows[0]["worst_ratio"] == 0.0 and rows[1]["worst_ratio"] > 1


# -- constants once ----------------------------------------------------------------------------------

ONCE = {"UNIT_ROUNDOFF", "DTYPES", "SIGNIFICAND_BITS", "OTHER_DTYPE", "WIDEN", "SAFETY", "FLOOR_ULPS"}


def _assigned(path: Path) -> set[str]:
    """The names a module assigns at its top level (``NAME = ...``, ``NAME: T = ...``)."""
    names = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        names |= {t.id.lstrip("_") for t in targets if isinstance(t, ast.Name)}
    return names


def test_the_numbers_every_tolerance_is_built_from_are_defined_once():
    modules = sorted(p for package in ("crosscheck", "backends") for p in (ROOT / package).rglob("*.py"))
    where = {
        p.relative_to(ROOT).as_posix(): sorted(_assigned(p) & ONCE) for p in modules if _assigned(p) & ONCE
    }
    assert where == {"crosscheck/_compare/constants.py": sorted(ONCE)}


def test_the_constants():
    assert constants.DTYPES == ("float32", "float64")
    assert constants.UNIT_ROUNDOFF == {"float32": 2.0**-24, "float64": 2.0**-53}
    assert constants.WIDEN == 2.0**-29
    # A 16-bit case's rounding is measured by its float32 re-run (a float64 one would add 2**-16 of it).
    other = {"float32": "float64", "float64": "float32", "bfloat16": "float32", "float16": "float32"}
    assert constants.OTHER_DTYPE == other
