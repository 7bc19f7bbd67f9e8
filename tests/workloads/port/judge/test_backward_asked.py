"""The backward verdict's comparisons made only as it asks (``backward.compared_as_asked``,
``compare.Outcomes``): on each planted backward bug of the custom op examples, every outcome asked is
the one comparing every module (``compare.each_module``) finds, the module named is the one the verdict
over every comparison names, and fewer comparisons are made: none after the module named, and none of an
input cotangent whose arrays are bit for bit an output cotangent's already compared."""

from __future__ import annotations

import pytest

import crosscheck
from crosscheck._workloads.port.judge import backward, compare, localize

pytest.importorskip("torch")
pytest.importorskip("flax")


def _every(order, outs, ins, differs):
    """The verdict over every module's comparison: the first in backward order whose output agrees and
    whose input, or its own parameters' gradients, differ; the innermost such inside it."""
    found = [n for n in order if outs.get(n) is True and (ins.get(n) is False or n.split("#")[0] in differs)]
    if not found:
        return None
    picked = found[0]
    inner = [n for n in found if n.split("#")[0].startswith(picked.split("#")[0] + ".")]
    while inner:
        picked = inner[0]
        inner = [n for n in inner if n.split("#")[0].startswith(picked.split("#")[0] + ".")]
    return picked


@pytest.fixture
def origins(monkeypatch):
    """Each call of ``backward.origin``: its arguments, its verdict and the comparisons it made."""
    seen: list[dict] = []
    made: list[str] = []
    inside = [False]
    original_origin, original_compare = backward.origin, localize.compare_arrays

    def counted(label, *args, **kwargs):
        if inside[0]:
            made.append(label)
        return original_compare(label, *args, **kwargs)

    def spied(found, fallback, compared, differs, **kwargs):
        inside[0] = True
        try:
            got = original_origin(found, fallback, compared, differs, **kwargs)
        finally:
            inside[0] = False
        seen.append(
            {"found": found, "compared": compared, "differs": differs, "got": got, "made": list(made)}
        )
        made.clear()
        return got

    monkeypatch.setattr(localize, "compare_arrays", counted)
    monkeypatch.setattr(backward, "origin", spied)
    return seen


@pytest.mark.parametrize(
    ("spec", "module"),
    [
        ("examples.port.custom_op:missing_term", "norm"),
        ("examples.port.custom_op:weight_grad", "norm"),
        ("examples.port.custom_op_nnx:missing_term", "norm"),
        (
            "examples.port.custom_op_scanned:missing_term",
            "layers.3.norm",
        ),  # the last layer: first in backward order
    ],
)
def test_the_backward_verdict_is_the_same_with_fewer_comparisons(spec, module, origins):
    import importlib

    name, _, attr = spec.partition(":")
    report = crosscheck.run(
        workload=getattr(importlib.import_module(name), attr), backends=["jax"], reference="torch"
    )
    verdict = report.backends["jax"].notes["port"]
    assert (verdict["starts_in"], verdict["module"]) == ("gradient", module), verdict
    (call,) = origins
    found, compared, differs = call["found"], call["compared"], call["differs"]
    asked = backward.compared_as_asked(
        found.torch, found.jax, compared, compared.paired, name="jax", dtype="float32"
    )
    paired = asked.paired
    every_outs: dict = {}
    every_ins: dict = {}
    _, every_outs, every_ins, _ = compare.each_module(found.torch, found.jax, paired, asked._common)
    order = [r.name for r in reversed(found.torch.main) if r.name in paired]
    assert _every(order, every_outs, every_ins, differs) == module == call["got"].module
    for n in order:  # each outcome, asked of a fresh one, is the one comparing every module finds
        assert asked.output(n) == every_outs.get(n), n
        assert asked.input(n) == every_ins.get(n), n
    everything = len(every_outs) + len(every_ins)
    assert asked.made < everything  # arrays met again (an input that is another's output) not compared
    assert 0 < len(call["made"]) < asked.made  # only up to the module named
