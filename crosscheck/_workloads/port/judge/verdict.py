"""Where a port differs, from its module comparisons (``localize``): the verdict's ``Origin``, and the
``Located`` record that carries it with the comparisons to the verdict's words (``say``).

The verdict names the first paired module, in the order the PyTorch calls finished, whose output
differs. Only where its input agrees does the difference start inside it. When its input already
differs, or could not be compared (no layout of it proven by the values), the difference was made before
it, between the last module that agreed and this one: a PyTorch module there without a JAX counterpart
whose input and output link the two (an activation the port computes as a plain function) is named;
otherwise the module whose own code runs between them (an attention's scaling between its projections).
When every output agrees and a gradient does not, the difference is in the backward pass: the last
module, in forward order, whose parameters' gradients differ, and the modules between it and the next
that agrees.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from crosscheck._compare.record import Comparison


@dataclasses.dataclass(frozen=True)
class Origin:
    """``starts_in``: ``"forward"``, ``"gradient"`` or ``"nowhere"``; ``module`` where the difference
    starts ("" is the top module's own code), ``first`` the first paired module that differs,
    ``suspects`` PyTorch modules without a JAX counterpart in between; ``text`` says it in a line."""

    starts_in: str
    module: str | None
    first: str | None
    suspects: tuple[str, ...]
    text: str

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "suspects": list(self.suspects)}


@dataclasses.dataclass(frozen=True)
class Located:
    """A port candidate's module comparisons and where its difference starts (``origin``), with the
    ``caveats`` its words carry on how the modules were captured (a side not re-run in the other
    precision, modules left out, inputs written in place, submodule calls not captured; "" when none):
    what the verdict says (``say``)."""

    comparisons: list[Comparison]
    origin: Origin
    caveats: str = ""


def forward_origin(
    order: Sequence[Any],
    paired: dict[str, str],
    outputs: dict[str, bool | None],
    inputs: dict[str, bool | None],
    top: str,
) -> Origin | None:
    """The verdict of the forward pass (None when every paired output agrees). ``order`` is the
    PyTorch records in the order their calls finished; ``outputs``/``inputs`` say which agree."""
    index = {r.name: i for i, r in enumerate(order)}
    first = next((r for r in order if r.name in paired and outputs.get(r.name) is False), None)
    if first is None:
        return None
    kind = first.module_type
    if inputs.get(first.name):
        return Origin(
            "forward",
            first.name,
            first.name,
            (),
            f"the forward pass differs first at "
            f"{_shown(first.name, top)} ({kind}): its input agrees, so the difference starts inside it",
        )
    # its input differs, or could not be compared (no layout proven): the difference starts before it
    before = [r for r in order[: index[first.name]] if r.name in paired and outputs.get(r.name)]
    prev = before[-1] if before else None
    gap = [
        r for r in order[(index[prev.name] + 1 if prev else 0) : index[first.name]] if r.name not in paired
    ]
    linked = [
        r for r in gap if _same(r.outputs, first.inputs) and (prev is None or _same(r.inputs, prev.outputs))
    ]
    suspects = tuple(r.name for r in gap if not first.name.startswith(r.name + ".") and r.name)
    where = (
        f"between {_shown(prev.name, top)} and {_shown(first.name, top)}"
        if prev
        else f"before `{first.name}`"
    )
    if linked and inputs.get(first.name) is False:
        return Origin(
            "forward",
            linked[0].name,
            first.name,
            suspects,
            f"the forward pass differs first at `{linked[0].name}` ({linked[0].module_type}, a PyTorch "
            f"module the port computes without a module): {where} its input agrees and the "
            f"input of `{first.name}` it feeds differs",
        )
    parent = _entered(first.name, _common_parent(prev.name if prev else "", first.name), paired, inputs)
    also = f"; PyTorch modules run there without a JAX counterpart: {', '.join(suspects)}" if suspects else ""
    inner = _running(first.name, suspects, parent, inputs)
    if inner is not None:  # the modules run in between are inside one module `first` is part of
        parent, where = inner, f"(or just before it, in {_shown(parent, top)}) {where}"
    return Origin(
        "forward",
        parent,
        first.name,
        suspects,
        f"the forward pass differs first in the code of {_shown(parent, top)} {where}: "
        f"`{first.name}` ({kind}) is the first module whose output differs, and its input "
        f"{'already differs' if inputs.get(first.name) is False else 'could not be compared'}{also}",
    )


def listed_origin(
    order: Sequence[Any], paired: dict[str, str], outputs: dict[str, bool | None], top: str
) -> Origin | None:
    """The forward verdict of user-listed intermediates (``jax_intermediates``; None when every one
    agrees): the JAX side's inputs are not captured, so the difference lies in the first listed
    module that differs or in the code since the last listed output that agrees."""
    first = next((r for r in order if r.name in paired and outputs.get(r.name) is False), None)
    if first is None:
        return None
    index = {r.name: i for i, r in enumerate(order)}
    before = [r for r in order[: index[first.name]] if r.name in paired and outputs.get(r.name)]
    prev = before[-1] if before else None
    start = index[prev.name] + 1 if prev else 0
    gap = tuple(r.name for r in order[start : index[first.name]] if r.name and r.name not in paired)
    there = f" (PyTorch modules there: {', '.join(gap)})" if gap else ""
    if not first.name:
        after = f" after `{prev.name}`" if prev else ""
        text = (
            f"the forward pass differs first at the top module ({top}): every listed output agrees and "
            f"the JAX side's inputs are not captured, so the difference is in its code{after}{there}"
        )
    else:
        agrees = (
            f"`{prev.name}`, the listed module before it, agrees" if prev else "no module before it is listed"
        )
        since = f"between `{prev.name}` and it" if prev else "before it"
        text = (
            f"the forward pass differs first at `{first.name}` ({first.module_type}), the first listed "
            f"module whose output differs: {agrees} and the JAX side's inputs are not captured, so the "
            f"difference is in `{first.name}` or in the code {since}{there}"
        )
    return Origin("forward", first.name, first.name, gap, text)


#: How a gradient verdict starts where every captured module's output agrees (``locate`` says fewer
#: where fewer were captured: the listed modules, or the output alone).
AGREES = "forward agrees (every module's output within its rounding)"


def gradient_origin(
    order: Sequence[Any], paired: dict[str, str], differs: set[str], owners: set[str], top: str
) -> Origin:
    """The verdict when every output agrees and the gradients of ``differs`` (modules) do not."""
    with_params = [r for r in order if r.name.split("#")[0] in owners]
    bad = [i for i, r in enumerate(with_params) if r.name.split("#")[0] in differs]
    last = with_params[bad[-1]]
    after = next((r for r in with_params[bad[-1] + 1 :] if r.name.split("#")[0] not in differs), None)
    index = {r.name: i for i, r in enumerate(order)}
    stop = index[after.name] if after else len(order)
    gap = tuple(
        r.name
        for r in order[index[last.name] + 1 : stop]
        if r.name and not r.name.startswith(last.name + ".")
    )
    gap = tuple(n for n in gap if not (after and after.name.startswith(n + ".")))
    nxt = f"those of `{after.name}` agree" if after else "no module after it has parameters"
    there = f" (modules there: {', '.join(gap)})" if gap else ""
    return Origin(
        "gradient",
        last.name,
        last.name,
        gap,
        f"{AGREES}; the gradient differs first, "
        f"in backward order, at {_shown(last.name, top)}: its parameters' gradients differ and "
        f"{nxt}, so the backward pass of what runs between them differs{there}",
    )


def _same(a: Sequence[np.ndarray], b: Sequence[np.ndarray]) -> bool:
    return bool(a) and bool(b) and a[0].shape == b[0].shape and np.array_equal(a[0], b[0])


def _running(first: str, between: Sequence[str], parent: str, inputs: dict[str, bool | None]) -> str | None:
    """The innermost module that holds ``first`` and every PyTorch module run ``between`` the last
    output that agrees and ``first``'s (so it was running there: Llama's ``self_attn``, whose ``q_proj``,
    ``k_proj``, ``v_proj`` a fused port has no counterpart of), when deeper than ``parent`` and its input
    is not known to differ (then the difference was made before it); else None."""
    if not between:
        return None
    for owner in _around(first.split("#")[0], parent):
        if all(b.split("#")[0].startswith(owner + ".") for b in between):
            return owner if inputs.get(owner) is not False else None
    return None


def _around(first: str, parent: str) -> list[str]:
    """The modules that hold ``first`` and are deeper than ``parent``, innermost first."""
    tokens = first.split(".")[:-1]
    depth = len(parent.split(".")) if parent else 0
    return [".".join(tokens[:n]) for n in range(len(tokens), depth, -1)]


def _common_parent(a: str, b: str) -> str:
    common = []
    for x, y in zip(a.split("#")[0].split("."), b.split("#")[0].split(".")[:-1], strict=False):
        if x != y:
            break
        common.append(x)
    return ".".join(common)


def _entered(first: str, parent: str, paired: dict[str, str], inputs: dict[str, bool | None]) -> str:
    """The innermost module around ``first``, inside ``parent``, whose input agrees (a paired one): the
    difference starts in its code before ``first`` (an attention whose q, k, v projections the port
    fused into one leaf has no JAX counterpart for them, and ``first`` is its output projection)."""
    if "#" in first:
        return parent
    return next((name for name in _around(first, parent) if name in paired and inputs.get(name)), parent)


def _shown(name: str, top: str) -> str:
    return f"`{name}`" if name else f"the top module ({top})"
