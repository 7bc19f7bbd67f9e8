"""Every tolerance term is built in one module, ``crosscheck._compare.terms``: each builder gives the
expected numbers on a tiny known case, each help text the words reports have always shown, and no
module but ``terms.py`` multiplies by the numbers a term is made of (a judge calls the builder)."""

from __future__ import annotations

import ast
import math
from pathlib import Path

import numpy as np
import pytest
from paths import ROOT

from crosscheck._compare import terms
from crosscheck._compare.constants import FLOOR_ULPS, SAFETY, WIDEN

U32, U64 = 2.0**-24, 2.0**-53

# -- the builders, on tiny known cases ----------------------------------------------------------------


def test_the_floor_is_so_many_unit_roundoffs_of_the_largest_entry():
    assert terms.largest(np.array([[-3.0, 2.0], [1.0, 0.0]])) == 3.0
    assert terms.largest(np.zeros(0)) == 0.0
    assert terms.floor(3.0, U32) == 8 * 3 * U32
    assert terms.floor(3.0, U64, ulps=64.0) == 64 * 3 * U64
    # Summed over a direction's entries: their count, or in quadrature (the direction's norm).
    assert terms.floor(3.0, U32, across=16) == 16 * 8 * 3 * U32
    norm = np.array([2.0, 4.0])
    assert np.array_equal(terms.floor(3.0, U32, across=norm), [2 * 24 * U32, 4 * 24 * U32])
    # One largest entry per step (a train's), kept as an array.
    per_step = np.array([[1.0], [0.5]])
    assert np.array_equal(terms.floor(per_step, U32), [[8 * U32], [4 * U32]])
    # The stack's judges' floor is the safety factor's: the same 8 today, named for what it is.
    assert terms.SAFETY_FLOOR_ULPS == SAFETY == FLOOR_ULPS == 8.0
    assert terms.floor(3.0, U32, ulps=terms.SAFETY_FLOOR_ULPS) == terms.floor(3.0, U32)


def test_the_modelled_rounding_is_safety_sigmas():
    assert terms.modelled(0.5) == 4.0
    assert np.array_equal(terms.modelled(np.array([1.0, 0.0, 2.0**-30])), [8.0, 0.0, 2.0**-27])


def test_the_measured_rounding_is_safety_times_the_difference_plus_its_rms():
    difference = np.array([3.0, 4.0, 0.0, 0.0])  # RMS sqrt(25 / 4) = 2.5
    assert terms.rms(difference) == 2.5
    assert terms.rms(np.zeros(0)) == 0.0
    assert np.array_equal(terms.measured(difference), [44.0, 52.0, 20.0, 20.0])
    # A spread of its own (over a layer, a step), and a float64 case's widening.
    assert np.array_equal(terms.measured(np.array([1.0]), 0.5), [12.0])
    assert np.array_equal(
        terms.measured(difference, widen=WIDEN), [44 * WIDEN, 52 * WIDEN, 20 * WIDEN, 20 * WIDEN]
    )
    assert terms.widening("float64") == WIDEN == 2.0**-29
    assert terms.widening("float32") == terms.widening("bfloat16") == 1.0


def test_the_float32_permit_and_the_16_bit_cap():
    wide = np.array([1.0, -1.0])  # scale |value| + RMS = 2
    assert np.array_equal(terms.bound(wide), [256 * U32 * 2, 256 * U32 * 2])
    assert np.array_equal(terms.bound(wide, shared=2.0), [256 * U32 * 4, 256 * U32 * 4])
    assert np.array_equal(terms.bound(wide, dtype="bfloat16"), [16 * 2.0**-8 * 2] * 2)
    assert np.array_equal(terms.bound(wide, dtype="float16"), [16 * 2.0**-11 * 2] * 2)
    assert terms.permit_dtype("float32") == terms.permit_dtype("float64") == "float32"
    assert terms.permit_dtype("bfloat16") == "bfloat16"
    assert np.array_equal(terms.travelled(np.array([2.0])), [256 * U32 * 2])
    # The typical entry against what is permitted; entries zero in both precisions say nothing.
    limit = np.array([1.0, 1.0, 1.0])
    assert terms.median_ratio(np.array([0.5, 3.0, 0.0]), limit, np.array([1.0, 1.0, 0.0])) == 1.75
    assert terms.median_ratio(np.zeros(2), np.ones(2), np.zeros(2)) == 0.0
    # Beyond the permit, the measured difference is capped there: never its own tolerance.
    permitted = 256 * U32 * 2
    signed, ratio = terms.cap(np.array([4 * permitted, -4 * permitted]), wide)
    assert ratio == 4.0 and np.array_equal(signed, [permitted, -permitted])
    within, ratio = terms.cap(np.array([permitted / 2, 0.0]), wide)
    assert ratio == 0.25 and np.array_equal(within, [permitted / 2, 0.0])  # the median of 1/2 and 0


# -- the words: what reports have always said ---------------------------------------------------------


def test_the_help_texts_are_the_builders():
    assert terms.floor_help("the output's largest entry") == "8 unit roundoffs of the output's largest entry"
    assert terms.modelled_help("what rounding can do") == "what rounding can do (modelled, x8 sigma)"
    said = terms.measured_help("mine", "|a - b|", "its RMS", then=", scaled")
    assert said == "mine, measured: 8 x (|a - b| + its RMS), scaled"
    assert (
        terms.measured_help("yours", "|a - b|", "RMS", again=True)
        == "yours, measured the same way (8 x (|a - b| + RMS))"
    )
    assert terms.TERM_HELP == {"slack": "user slack: atol + rtol * |reference|"}


def _term_helps() -> dict[str, dict[str, str]]:
    from crosscheck._workloads.model import compare as model
    from crosscheck._workloads.port.judge import localize as port
    from crosscheck._workloads.stack.judge import hvp_screen
    from crosscheck._workloads.stack.judge import terms as stack
    from crosscheck._workloads.stack.oracle import hvp
    from crosscheck._workloads.train import judge as train

    return {
        "stack": stack.TERM_HELP,
        "model": model.TERM_HELP,
        "port": port.TERM_HELP,
        "train": train.TERM_HELP,
        "hvp": {"rerun": hvp.RERUN_HELP},
        "hvp_screen": {"rerun": hvp_screen.RERUN_HELP},
    }


#: The rounding and floor help of every judge, byte for byte as its reports have said them.
SAID = {
    ("stack", "rounding"): "what the candidate's own rounding can produce on this case (modelled, x8 sigma)",
    (
        "stack",
        "floor",
    ): "8 unit roundoffs of the largest reference entry: the precision no entry is asked to beat",
    ("model", "rounding"): (
        "the candidate's own rounding, measured: 8 x (|its gradient - its re-run in the other precision| "
        "(x 2**-29 for float64) + that difference's RMS over the parameter)"
    ),
    ("model", "floor"): (
        "8 unit roundoffs of the parameter's largest reference entry; in a float64 case, where both "
        "values lie within float64 rounding of the gradient's scale (256 u x (|reference| + its RMS + the "
        "whole gradient's RMS)), twice that: not a difference (a float32 re-run, saturated first, cannot "
        "measure it)"
    ),
    ("model", "slack"): "user slack: atol + rtol * |reference|",
    ("port", "rounding"): (
        "the JAX port's own rounding of this output, measured: 8 x (|its output - its re-run in the other "
        "precision| (x 2**-29 for float64) + that difference's RMS)"
    ),
    ("port", "floor"): "8 unit roundoffs of the output's largest entry",
    ("train", "rounding"): (
        "the candidate's rounding, measured: 8 x (|its float32 trajectory - its float64 re-run| at that "
        "step + that difference's RMS over the parameter at that step)"
    ),
    (
        "train",
        "reference",
    ): "the reference's rounding, measured the same way (8 x (|float32 - float64| + RMS))",
    ("train", "floor"): "8 unit roundoffs of the parameter's largest reference entry at that step",
    ("hvp", "rerun"): (
        "the candidate's own rounding, measured: 8 x (|its HVP - its HVP re-run in the other precision| "
        "+ that difference's RMS over the layer), scaled by the unit-roundoff ratio for a float64 case"
    ),
    ("hvp_screen", "rerun"): (
        "the candidate's own rounding along each direction, measured: 8 x (|D . (its HVP - its HVP re-run "
        "in the other precision)| + ||D|| x that difference's RMS over the layer), scaled as for the full "
        "check"
    ),
}


@pytest.mark.parametrize(("judge", "term"), list(SAID), ids=[f"{j}-{t}" for j, t in SAID])
def test_every_judge_says_its_terms_as_reports_always_have(judge, term):
    assert _term_helps()[judge][term] == SAID[judge, term]


# -- built in one module --------------------------------------------------------------------------------

#: The numbers a term is made of: multiplying by one is building a term.
TERM_NUMBERS = {"SAFETY", "FLOOR_ULPS", "SAFETY_FLOOR_ULPS", "PERMIT_ULPS", "LOW_PERMIT_ULPS"}


def _named(node: ast.AST) -> str | None:
    """The name ``node`` reads (``SAFETY``, ``_stack.SAFETY``, ``LOW_PERMIT_ULPS[dtype]``), or None."""
    if isinstance(node, ast.Subscript):
        node = node.value
    if isinstance(node, ast.Name):
        return node.id
    return node.attr if isinstance(node, ast.Attribute) else None


def term_arithmetic(source: str) -> list[int]:
    """The lines of ``source`` that multiply by one of ``TERM_NUMBERS`` (``x * SAFETY``, ``x *= SAFETY``)."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
            operands = (node.left, node.right)
        elif isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Mult):
            operands = (node.target, node.value)
        else:
            continue
        if any(_named(o) in TERM_NUMBERS for o in operands):
            lines.append(node.lineno)
    return sorted(set(lines))


@pytest.mark.parametrize(
    ("source", "found"),
    [
        ("tol = SAFETY * sigma", [1]),
        ("tol = _stack.SAFETY * 2 * n * u", [1]),
        ("floor = u * FLOOR_ULPS\nx = 1", [1]),
        ("x = 1\nx *= SAFETY", [2]),
        ("limit = permit.PERMIT_ULPS * u * path", [1]),
        ("limit = LOW_PERMIT_ULPS[dtype] * u", [1]),
        ("error = ESTIMATE_SAFETY * e + SAFETY", []),
        ("tol = terms.measured(d) + terms.floor(m, u, ulps=terms.SAFETY_FLOOR_ULPS)", []),
    ],
    ids=["name", "attribute-chain", "right", "augmented", "permit", "subscript", "other-names", "calls"],
)
def test_the_check_finds_term_arithmetic(source, found):
    assert term_arithmetic(source) == found


def test_no_module_but_terms_builds_a_term():
    modules = sorted(p for package in ("crosscheck", "backends") for p in (ROOT / package).rglob("*.py"))
    assert len(modules) > 100
    found = {}
    for path in modules:
        where = term_arithmetic(path.read_text(encoding="utf-8"))
        if where:
            found[path.relative_to(ROOT).as_posix()] = where
    # terms.py builds every term; nothing else multiplies by the numbers they are made of.
    assert set(found) == {"crosscheck/_compare/terms.py"}, found


#: Every judge and localizer that builds tolerance terms: each imports the one module.
BUILDERS = (
    "crosscheck/_workloads/stack/rounding.py",
    "crosscheck/_workloads/stack/explain.py",
    "crosscheck/_workloads/stack/judge/full.py",
    "crosscheck/_workloads/stack/judge/screen.py",
    "crosscheck/_workloads/stack/judge/spot.py",
    "crosscheck/_workloads/stack/judge/hvp.py",
    "crosscheck/_workloads/stack/judge/hvp_screen.py",
    "crosscheck/_workloads/stack/oracle/hvp.py",
    "crosscheck/_workloads/model/rounding.py",
    "crosscheck/_workloads/model/compare.py",
    "crosscheck/_workloads/port/judge/localize.py",
    "crosscheck/_workloads/train/judge.py",
)


def _imports_terms(path: Path) -> bool:
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module == "crosscheck._compare":
            if any(a.name == "terms" for a in node.names):
                return True
        if isinstance(node, ast.ImportFrom) and node.module == "crosscheck._compare.terms":
            return True
    return False


@pytest.mark.parametrize("module", BUILDERS, ids=[Path(m).stem for m in BUILDERS])
def test_every_judge_takes_its_terms_from_the_one_module(module):
    path = ROOT / module
    assert _imports_terms(path), f"{module} does not import crosscheck._compare.terms"
    # ... and takes none of the numbers themselves: a term is asked for, not made.
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module == "crosscheck._compare.constants":
            assert not {a.name for a in node.names} & TERM_NUMBERS, module


def test_the_permit_has_no_second_home():
    assert not (ROOT / "crosscheck" / "_compare" / "permit.py").exists()
    assert math.isclose(terms.PERMIT_ULPS * U32, 2.0**-16)


# -- a re-run that is another computation ----------------------------------------------------------------


def test_a_redrawn_mask_is_another_computation_and_a_mask_at_the_dtypes_minimum_is_not():
    from crosscheck._compare import terms

    rng = np.random.default_rng(0)
    wide = rng.standard_normal(240)
    narrow = wide.astype(np.float32).astype(np.float64)
    redrawn = narrow * (rng.random(240) > 0.1)  # another dropout mask on ~10 % of the entries
    capped, found = terms.capped(np.abs(redrawn - wide), wide)
    assert found is not None and found.entries > 0.05 * 240
    assert np.all(capped <= terms.bound(wide, 0.0, "float32"))
    # T5's causal mask, finfo(dtype).min in each precision (a float64 check with float32 steps measures
    # against the float32 run's -3.4e38): a range constant, not a redrawn draw
    wide[:60], narrow[:60] = np.finfo(np.float32).min, np.finfo(np.float64).min
    assert terms.capped(np.abs(narrow - wide), wide)[1] is None


@pytest.mark.parametrize("size", [2, 3, 1000, 1001, 700_001])
@pytest.mark.parametrize("zeros", [0.0, 0.3, 0.49, 0.5, 0.51, 0.9])
def test_a_median_of_nonnegative_ratios_past_their_zeros_is_the_partitioned_one(size, zeros, monkeypatch):
    """``median_of_ratios(nonnegative=True)`` (issue 38): the zeros past the middle give +0 without a
    partition, and a middle past them is found among the nonzero entries alone, moved to the front a
    block at a time (``terms.MOVE``, made small: several blocks): bit for bit the number of the whole
    array's partition (``nonnegative=False``), with entries left out (``informative``), even and odd."""
    monkeypatch.setattr(terms, "MOVE", 1000)
    rng = np.random.default_rng(size)
    ratios = rng.random(size) * 10.0 ** rng.uniform(-3, 3)
    ratios[rng.random(size) < zeros] = 0.0
    ratios[:: max(size // 7, 1)] = np.inf if size > 3 else ratios[:: max(size // 7, 1)]
    for informative in (None, (ratios != 0) | (rng.random(size) < 0.5)):
        want = terms.median_of_ratios(ratios.copy(), None, informative, nonnegative=False)
        got = terms.median_of_ratios(ratios.copy(), None, informative, nonnegative=True)
        assert repr(got) == repr(want)


@pytest.mark.parametrize("size", [0, 1, 2, 3, 1000, 1001])
@pytest.mark.parametrize("zeros", [0.0, 0.3, 0.5, 0.51, 1.0])
def test_a_median_from_the_nonzero_ratios_alone_is_the_partitioned_one(size, zeros):
    """``median_past_zeros`` (issue 38, change T4): the median of ``size`` nonnegative ratios from their
    nonzero entries and the count of those left out is bit for bit ``median_of_ratios``' of them all
    (``nonnegative=False``: the whole partition), entries left out or not, even and odd sizes, all zero,
    none zero, none at all."""
    rng = np.random.default_rng(size + int(100 * zeros))
    ratios = rng.random(size) * 10.0 ** rng.uniform(-3, 3)
    ratios[rng.random(size) < zeros] = 0.0
    if size > 3:
        ratios[1] = np.finfo(np.float64).max  # what an infinite ratio is cleaned to
    for informative in (None, (ratios != 0) | (rng.random(size) < 0.5)):
        want = terms.median_of_ratios(ratios.copy(), None, informative, nonnegative=False)
        left = 0 if informative is None else size - int(np.count_nonzero(informative))
        got = terms.median_past_zeros(ratios[ratios != 0], size, left)
        assert repr(got) == repr(want)
