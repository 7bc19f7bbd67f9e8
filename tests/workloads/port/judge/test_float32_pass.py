"""A float32 pass of a port says what it cannot see (``low.text`` through the model judge and ``say``):
the custom op whose backward moves the epsilon outside the square root (a part in ten million, below
float32's rounding) passes in float32, and the verdict says how large a difference it cannot tell and
that ``--dtype float64`` sees it; the forward check says the same of the module outputs."""

from __future__ import annotations

import importlib.util
import re

import pytest

pytestmark = pytest.mark.skipif(
    any(importlib.util.find_spec(name) is None for name in ("torch", "flax")),
    reason="needs torch and flax (the port extra)",
)

CAVEAT = "by less is not seen in float32: check in float64 too (--dtype float64)"


def _relative(text: str) -> float:
    found = re.search(
        r"agrees in float32, within its rounding \(measured: a median (\S+) of an entry\)", text
    )
    assert found, text
    return float(found.group(1))


def test_a_float32_pass_names_the_difference_it_cannot_see_and_float64():
    import crosscheck
    from examples.port import custom_op

    report = crosscheck.check(custom_op.eps_outside_sqrt, reference="torch", backends=["jax"])
    assert report.passed  # the bug is below float32's rounding: not seen in float32
    text = report.verdicts()["jax"]
    assert text.endswith(f"a bug that moves the gradients {CAVEAT}")
    assert 1e-8 < _relative(text) < 1e-4  # float32's rounding, relative, measured on this case
    assert report.caveats() == [f"`jax`: a bug that moves the gradients {CAVEAT}"]


def test_a_float32_forward_pass_says_it_of_the_module_outputs():
    import crosscheck
    from examples.port import custom_op

    report = crosscheck.check(custom_op.port, quantity="output")
    assert report.passed
    assert f"a bug that moves the module outputs {CAVEAT}" in report.verdicts()["jax"]


def test_a_float64_pass_has_no_such_caveat():
    import crosscheck
    from examples.port import custom_op

    report = crosscheck.check(custom_op.port, reference="torch", backends=["jax"], dtype="float64")
    assert report.passed
    assert "not seen in" not in report.verdicts()["jax"] and report.caveats() == []
