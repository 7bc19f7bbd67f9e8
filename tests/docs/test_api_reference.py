"""The API reference lists every public name, each with an example that runs: ``crosscheck.__all__``
against the mkdocstrings entries of docs/reference/api.md (``::: crosscheck.NAME``, or the defining
module's path for a name imported when first asked for), and each entry's
docstring examples run as doctests (those marked ``+SKIP`` need JAX, PyTorch or a file of yours)."""

from __future__ import annotations

import doctest
import importlib
import re
from typing import Any

import numpy as np
import pytest
from paths import ROOT

import crosscheck

API = ROOT / "docs" / "reference" / "api.md"
ENTRIES = re.findall(r"^::: (\S+)$", API.read_text(encoding="utf-8"), flags=re.MULTILINE)


def _resolve(target: str) -> Any:
    module, _, name = target.rpartition(".")
    return getattr(importlib.import_module(module), name)


def _public(target: str) -> str:
    """The public name an entry documents: ``crosscheck.NAME``, or the module that defines a name the
    package imports when first asked for (``crosscheck._sweep.blocks.check_blocks``: the same object)."""
    name = target.rpartition(".")[2]
    if target != f"crosscheck.{name}" and _resolve(target) is getattr(crosscheck, name, None):
        return name
    return target.removeprefix("crosscheck.")


def test_every_public_name_has_an_entry():
    documented = {_public(t) for t in ENTRIES}
    assert sorted(set(crosscheck.__all__) - documented) == []
    assert len(ENTRIES) == len(set(ENTRIES)), "an entry is listed twice"


@pytest.mark.parametrize("target", ENTRIES)
def test_each_entry_has_an_example_that_runs(target):
    obj = _resolve(target)
    doc = obj.__doc__ or ""
    assert "\n    Example:\n" in doc or "\nExample:\n" in doc, f"{target} has no `Example:` section"
    names = {"crosscheck": crosscheck, "np": np, **{n: getattr(crosscheck, n) for n in crosscheck.__all__}}
    test = doctest.DocTestParser().get_doctest(doc, names, target, None, 0)
    assert test.examples, f"{target}'s example has no `>>>` line"
    out: list[str] = []
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    runner.run(test, out=out.append)
    assert runner.failures == 0, "".join(out)
