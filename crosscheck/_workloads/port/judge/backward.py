"""Where the backward pass differs, by cotangents: when every module's output agrees and a gradient does
not, both sides' gradients of the loss with respect to each module's output and first input are
captured (PyTorch: full backward hooks, ``torch_cotangents``; a Flax linen, nnx or Equinox port: zero
perturbations differentiated exactly, a scan's steps one by one, ``jax_cotangents``; an Equinox
module's calls labelled by ``equinox_cotangents``, paired with PyTorch's modules as the mapping's leaves
pair them, or by name, those outside ``jax.vmap`` or mapped by it themselves) at the case's
dtype, and compared as module outputs are, within the rounding PyTorch's re-run in the other precision
measures (the port's re-run would compile a second program, most of the cost; these comparisons only
locate a difference the gradients already failed on, they never pass or fail a check). Each is made
only where the verdict needs it (``compare.Outcomes``), in backward order, up to the module named.

The module named is the first, in backward order (the forward calls' finishing order, reversed), whose
output's cotangent agrees and whose input's cotangent, or its own parameters' gradients, differ: its
backward alone makes the difference (a module inside it that does so too is named instead). A module
whose output is made by a ``torch.autograd.Function``, or that runs a ``jax.custom_vjp`` or
``jax.custom_jvp``, is said to be a custom op. Only a failing gradient pays for these captures (three
forward and backward passes, the port's compiled); where they cannot be made (a function, which has
no modules; an Equinox port none of whose submodule calls is perturbed and paired; a failed pass), the
verdict by parameters' gradients (``verdict.gradient_origin``) stands, and says why.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from crosscheck._compare.constants import OTHER_DTYPE
from crosscheck._workloads.port.declare.build import Prepared, jax_implementation, torch_implementation
from crosscheck._workloads.port.judge import capture, localize
from crosscheck._workloads.port.judge.compare import Outcomes
from crosscheck._workloads.port.judge.pairs import module_pairs
from crosscheck._workloads.port.judge.verdict import AGREES, Origin

#: What the verdict calls a port of each kind whose module edges are not captured.
_KINDS = {"function": "a function (it has no modules: no edges to compare)"}


@dataclasses.dataclass(frozen=True)
class Chains:
    """Both sides' cotangent records (``localize.Runs`` of ``ModuleCall``: ``outputs`` the gradients
    reaching a module's outputs, ``inputs`` the one leaving its first input) and, per side, the custom
    ops each call label runs; ``problem``: why they could not be captured ("" when they were);
    ``paired``: PyTorch record -> the port's, where not the forward comparison's (an Equinox port)."""

    torch: localize.Runs | None = None
    jax: localize.Runs | None = None
    custom: tuple[dict[str, tuple[str, ...]], dict[str, tuple[str, ...]]] = ({}, {})
    problem: str = ""
    paired: dict[str, str] | None = None


def torch_chains(prepared: Prepared, params: dict, inputs: dict) -> tuple[list, dict]:
    """The PyTorch side's cotangents at ``params`` and ``inputs`` (``torch_cotangents``)."""
    from crosscheck._workloads.port.sides import torch_cotangents

    return torch_cotangents.cotangents(prepared.torch_side, torch_implementation(prepared), params, inputs)


def jax_chains(prepared: Prepared, params: dict, inputs: dict) -> tuple[Any, ...]:
    """The JAX port's cotangents at ``params`` and ``inputs`` (``jax_cotangents``), in float64 under x64
    when the arrays are; an Equinox port's, then its calls left out, by the transform they ran under."""
    import jax

    from crosscheck._workloads.port.sides import jax_cotangents
    from crosscheck._workloads.programs import Kept

    wide = any(v.dtype == np.float64 for v in params.values())
    side = prepared.jax_side
    # compiled once per dtype and kept on the side, as its captures' passes are (traced afresh each check)
    kept = side.passes.setdefault(("cotangents", "float64" if wide else "float32"), Kept())
    if side.kind == "linen":
        with jax.enable_x64(wide):
            return jax_cotangents.cotangents(jax_implementation(prepared), params, inputs, kept)
    if side.kind == "equinox":
        from crosscheck._workloads.port.sides import equinox_cotangents

        seen = equinox_cotangents.Seen()
        with jax.enable_x64(wide), equinox_cotangents.labelled(side):
            intercept = equinox_cotangents.intercept(seen)
            got = jax_cotangents.cotangents(jax_implementation(prepared), params, inputs, kept, intercept)
        return (*got, dict(sorted(seen.mapped.items())))
    from crosscheck._workloads.port.sides import nnx_cotangents

    with jax.enable_x64(wide), nnx_cotangents.labelled(side):
        intercept = nnx_cotangents.intercept(side.model)
        return jax_cotangents.cotangents(jax_implementation(prepared), params, inputs, kept, intercept)


def chains(call: Any, workload: Any, point: Any) -> Chains:
    """Both sides' cotangents at the case's dtype, PyTorch's re-run in the other too, through the guarded
    ``call``; a re-run that fails is left out (each comparison then takes the rounding of ``each
    module``'s side without a re-run from the other)."""
    kind = workload.prepared.jax_side.kind
    if kind in _KINDS:
        return Chains(
            problem=f"they are captured for a Flax linen, nnx or Equinox port only, not {_KINDS[kind]}"
        )
    runs: list[localize.Runs] = []
    custom: list[dict[str, tuple[str, ...]]] = []
    for torch in (True, False):
        made: list[Any] = []
        # the port's re-run would compile a second program (most of these captures' cost): PyTorch's
        # re-run, eager and cheap, measures the rounding of both, as for any side without a re-run
        for dtype in (point.dtype, OTHER_DTYPE[point.dtype]) if torch else (point.dtype,):
            params, inputs = call.cast(point.params, dtype), call.cast(point.inputs, dtype)
            place, _ = capture.home(workload, call, torch=torch, dtype=dtype, case=point.dtype)
            with place:
                got = call(torch_chains if torch else jax_chains, workload.prepared, params, inputs)
            if got.error is not None and not made:
                side = "PyTorch" if torch else "JAX"
                return Chains(problem=f"the {side} side's capture failed: {got.error}")
            if got.error is not None:
                break
            made.append(got.value)
        records = [m[0] for m in made]
        runs.append(localize.Runs(records[0], records[1] if len(records) > 1 else ()))
        custom.append(made[0][1])
    found = Chains(runs[0], runs[1], (custom[0], custom[1]))
    return _equinox(found, workload.prepared, made[0][2]) if kind == "equinox" else found  # made: JAX's


def _equinox(found: Chains, prepared: Prepared, mapped: dict[str, str]) -> Chains:
    """An Equinox port's chains with their pairs: PyTorch's records with the port's that the mapping's
    leaves pair, or their names (``localize.pairs``), where each array has as many entries on both
    sides (a zero that stood for more than one call, under a map the trace could not see, has fewer);
    none paired: why (``mapped``: the submodules left out, by the transform they ran under)."""
    assert found.torch is not None and found.jax is not None
    theirs, mine = {r.name: r for r in found.torch.main}, {r.name: r for r in found.jax.main}
    paired = {
        t: j
        for t, j in localize.pairs(list(theirs), list(mine), module_pairs(prepared)).items()
        if t and _sizes(theirs[t]) == _sizes(mine[j])
    }
    if paired:
        return dataclasses.replace(found, paired=paired)
    if mapped and not mine:
        names = list(mapped)
        shown = ", ".join(f"`{n}`" for n in names[:6]) + (f" and {len(names) - 6} more" * (len(names) > 6))
        under = " or ".join(f"`{t}`" for t in dict.fromkeys(mapped.values()))
        why = (
            "where one example's zero would stand for the whole batch (call the model on the batch, "
            "mapping each module itself, `jax.vmap(self.fc1)(x)`, to have their gradients compared)"
            if set(mapped.values()) == {"jax.vmap"}
            else "traced once for every example or step, where one zero would stand for them all (call "
            "the model on the batch, mapping each module itself, `jax.vmap(self.fc1)(x)`, and loop over "
            "layers with `jax.lax.scan`, whose steps are perturbed one by one, to have their gradients "
            "compared)"
        )
        return Chains(
            problem=f"every submodule call of the Equinox module ({shown}) runs under {under}, {why}"
        )
    return Chains(
        problem=(
            "no submodule call of the Equinox module pairs with a PyTorch module's (by the mapping's leaves "
            "or by name, with as many entries)"
        )
    )


def _sizes(record: Any) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The sizes of a cotangent record's arrays: its inputs', its outputs'."""
    return tuple(np.size(a) for a in record.inputs), tuple(np.size(a) for a in record.outputs)


def origin(
    found: Chains, fallback: Origin, compared: Any, differs: set[str], *, name: str, top: str, dtype: str
) -> Origin:
    """The backward verdict by cotangents (see the module docstring); ``fallback`` (the verdict by
    parameters' gradients) where none could be captured or none decides, with why. ``differs``: the
    modules whose own parameters' gradients differ; ``compared``: the forward's ``compare.Compared``."""
    if found.torch is None or found.jax is None:
        said = f"the gradients at each module's output and input were not compared: {found.problem}"
        return dataclasses.replace(fallback, text=f"{fallback.text}; {said}")
    pairs = compared.paired if found.paired is None else found.paired
    outcomes = compared_as_asked(found.torch, found.jax, compared, pairs, name=name, dtype=dtype)
    paired = outcomes.paired
    order = [r.name for r in reversed(found.torch.main) if r.name in paired]
    picked = _first(order, outcomes.output, outcomes.input, differs)
    if picked is None:
        return fallback
    kind = next(r.module_type for r in found.torch.main if r.name == picked)
    shown = f"`{picked}`" if picked else f"the top module ({top})"
    inside = outcomes.input(picked) is False
    params = picked.split("#")[0] in differs
    leaving = (
        "the one leaving its input and its parameters' gradients do not"
        if inside and params
        else "the one leaving its input does not"
        if inside
        else "its parameters' gradients do not (the one leaving its input agrees)"
    )
    text = (
        f"{AGREES}; the backward of {shown} ({kind}) "
        f"differs: the gradient reaching its output agrees, {leaving}"
    )
    return Origin("gradient", picked, picked, (), text + _custom(picked, paired[picked], found.custom))


def compared_as_asked(
    torch_runs: localize.Runs,
    jax_runs: localize.Runs,
    compared: Any,
    pairs: dict[str, str],
    *,
    name: str,
    dtype: str,
) -> Outcomes:
    """Both sides' cotangents (``Chains``' ``torch`` and ``jax``) of each module of ``pairs`` (the
    forward's, ``compared.paired``, or the cotangents' own), each compared when first asked, as the
    forward's module outputs are."""
    t_names, j_names = {r.name for r in torch_runs.main}, {r.name for r in jax_runs.main}
    paired = {t: j for t, j in pairs.items() if t and t in t_names and j in j_names}
    common = {
        "dtype": dtype,
        "channels_last": compared.channels_last,
        "backend": name,
        "reference": "torch",
        "precision": "float32" if compared.coarse else None,
        "device": compared.device,
        "reference_device": compared.reference_device,
    }
    return Outcomes(torch_runs, jax_runs, paired, common)


def _first(
    order: Sequence[str],
    output: Callable[[str], bool | None],
    input_: Callable[[str], bool | None],
    differs: set[str],
) -> str | None:
    """The first module in backward ``order`` whose output's cotangent agrees (``output``) and whose
    input's (``input_``), or its own parameters' gradients, differ; the innermost such module inside it
    where there is one. Each module is asked about only as far as the answer needs: none after the
    first found but the modules inside it (which come after it in backward order), and no input where
    the output differs or the parameters' gradients already do."""

    def found(name: str) -> bool:
        return output(name) is True and (name.split("#")[0] in differs or input_(name) is False)

    at = next((k for k, n in enumerate(order) if found(n)), None)
    if at is None:
        return None
    picked = order[at]
    for n in order[at + 1 :]:
        if n.split("#")[0].startswith(picked.split("#")[0] + ".") and found(n):
            picked = n
    return picked


def _custom(torch_name: str, jax_name: str, custom: tuple[dict, dict]) -> str:
    """The verdict's words on a module that runs a custom op on either side ("" when neither does)."""
    theirs, mine = custom[0].get(torch_name, ()), custom[1].get(jax_name, ())
    if not theirs and not mine:
        return ""
    sides = []
    if theirs:
        sides.append(f"PyTorch: torch.autograd.Function {', '.join(f'`{n}`' for n in theirs)}")
    if mine:
        sides.append(f"the port: {', '.join(mine)}")
    return f"; `{torch_name}` is a custom op, its derivative written by hand ({'; '.join(sides)})"
