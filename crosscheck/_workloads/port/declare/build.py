"""A ``Port`` prepared: both sides described, the mapping built, and the ``Workload`` the engine runs.

The workload's parameters are the PyTorch module's trainable parameters that the mapping maps, named
as in its ``state_dict``; its inputs are the port's inputs plus every other tensor of the module (its
buffers: batch-norm statistics). The ``torch`` implementation calls the module with those tensors;
the ``jax`` implementation builds every JAX leaf from them through the mapping's transforms (inside
the differentiated function, so ``jax.grad`` returns the gradient in PyTorch's names and layouts).
A port has no NumPy ``reference``: the oracle differences each side's own loss in float64 (PyTorch
under ``torch.no_grad()``, JAX without a transform), which answers both questions, whether each
framework's derivative is right and whether the two compute the same function.
"""

from __future__ import annotations

import dataclasses
import fnmatch
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from crosscheck._backends import install_hint
from crosscheck._errors import describe, user_call
from crosscheck._types import FrameworkArray
from crosscheck._workloads.losses import floating_outputs, outputs_loss
from crosscheck._workloads.model.declare import Workload
from crosscheck._workloads.port.declare import problems as problems_module
from crosscheck._workloads.port.declare.fields import PortFields
from crosscheck._workloads.port.mapping import assemble
from crosscheck._workloads.port.mapping import table as mapping_module

if TYPE_CHECKING:
    from crosscheck._workloads.port.declare.convert import Conversion
    from crosscheck._workloads.port.sides.jax_side import JaxSide
    from crosscheck._workloads.port.sides.torch_side import Wrapped

#: The seed of the default loss's projection (``projection_loss``'s own default), recorded in the case.
SEED = 0


@dataclasses.dataclass(frozen=True, eq=False)
class Prepared:
    """What a port is made of once prepared (see the module docstring)."""

    port: PortFields
    torch_side: Wrapped
    jax_side: JaxSide
    table: mapping_module.Table
    values: dict[str, np.ndarray]  # every PyTorch tensor, by state_dict name
    parameters: dict[str, tuple[int, ...]]  # the differentiated ones
    input_names: tuple[str, ...]  # the port's own inputs (the rest of the workload's are tensors)
    conversion: Conversion | None = None  # of ``Port(convert=fn)``: it makes the JAX leaves

    @property
    def workload(self) -> Workload:
        cached = self.__dict__.get("_workload")
        if cached is None:
            cached = _workload(self)
            object.__setattr__(self, "_workload", cached)
        return cached

    def made(self, source: tuple[Mapping[str, Any], Mapping[str, Any]]) -> list[Any]:
        """The JAX leaves of ``(params, inputs)`` (``jax_leaves``): what a capture's compiled pass makes
        them from (the same function for every capture of the port, so its pass is compiled once)."""
        return jax_leaves(self, *source)

    def pieces(self) -> list[list[assemble.Piece]]:
        """Per JAX leaf (in order): the pieces of PyTorch tensors it is made of (``assemble``)."""
        by_leaf: dict[tuple[str, ...], list[assemble.Piece]] = {}
        for e in self.table.mapped():
            if e.jax is not None and e.torch is not None:
                by_leaf.setdefault(e.jax.path, []).append(assemble.Piece.of(e))
        return [by_leaf[leaf.path] for leaf in self.jax_side.leaves]

    def unmapped(self) -> dict[str, str]:
        """The PyTorch parameters left unmapped by an override: not checked, and why."""
        return {
            e.torch.name: "left unmapped by an override"
            for e in self.table.entries
            if e.status == "unmapped" and e.torch is not None and e.torch.kind == "parameter"
        }

    def torch_state(self, arrays: Mapping[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in arrays.items() if k in self.values}

    def user_inputs(self, arrays: Mapping[str, Any]) -> dict[str, Any]:
        return {k: arrays[k] for k in self.input_names}


def prepare(port: PortFields) -> Prepared:
    """Describe both sides and build the mapping (ambiguities are kept in the table, not raised).

    Every problem of the declaration is found before any is raised (``problems``): each override that
    does not fit, each of the listed intermediates (``intermediates``), an input named as a tensor, an
    ``unused`` pattern that matches nothing, a ``convert`` that does not fit; where one is found, the
    refusal says them all, the mapping table's too. A mapping whose only problems are the table's is
    returned (``print(port.mapping)`` shows it) and refused when its workload is made.

    Raises:
        ValueError: a framework is missing, the inputs are not arrays; the user code it runs failed
            (``UserCodeFailed``: ``inputs``, ``jax_inputs``, the PyTorch module's ``state_dict()``, the
            Flax module's ``init``, whatever they raised, ``sys.exit`` included); the problems above:
            one as it was found, several one ``Refused`` (a line each).
    """
    torch_side, jax_side = _sides()
    where = f"port `{port.name}`"
    described, values = user_call(
        where, "the PyTorch module's `state_dict()`", torch_side.tensors, port.torch
    )
    how = port.torch_call or (lambda module, inputs: module(**inputs))
    wrapped = torch_side.Wrapped(port.torch, how)
    example = make_inputs(port, np.random.default_rng(0), "float32")
    jax_example = jax_side.to_jax(example)
    jax_in = user_call(where, "`jax_inputs(inputs)`", jax_side_inputs, port, jax_example)
    params = port.jax_params
    if port.convert is not None:
        from crosscheck._workloads.port.declare import convert

        convert.steady(port, values)  # before any other call of it: the same leaves on a second call
        if params is None and jax_side.kind_of(port.jax) == "function":  # its result: the parameter tree
            params = convert.structure(port, values)
    side = jax_side.JaxSide(
        port.jax,
        params,
        port.jax_call,
        jax_in,
        port.jax_intermediates or (),
        where=where,
        training=lambda: bool(getattr(port.torch, "training", False)),
    )
    found = problems_module.Problems(where)
    table, conversion = _table(port, described, values, side, found)
    from crosscheck._workloads.port.declare import intermediates

    found.extend(intermediates.check(port, side, wrapped, values, example, jax_in))
    names = tuple(example)
    clash = sorted(set(names) & set(values))
    if clash:
        found.add(ValueError(f"input `{clash[0]}` has the name of a PyTorch tensor; rename it."))
    mapped = {e.torch.name for e in table.mapped() if e.torch is not None} if table is not None else ()
    parameters = {t.name: t.shape for t in described if t.kind == "parameter" and t.name in mapped}
    if table is not None:
        _stray(port, described, table, found)
    if found:  # refused now, with the table's problems (alone, they wait for the workload: `_workload`)
        said = (
            (mapping_problems(table, parameters, port.torch), refused_table(table))
            if table is not None
            else ()
        )
        found.refuse(*said)
    assert table is not None  # a `convert` that does not fit is a problem found: refused above
    if conversion is None and not table.problems():
        from crosscheck._workloads.port.declare import heads

        table = heads.prove(table, heads.differs(port, wrapped, side, values, example, jax_in))
    for array in values.values():  # crosscheck's own copies, never written: the case's arrays as they are
        array.flags.writeable = False  # (``declare.frozen``), not copied again for each run
    return Prepared(port, wrapped, side, table, values, parameters, names, conversion)


def _table(
    port: PortFields, described: Any, values: dict, side: Any, found: problems_module.Problems
) -> tuple[mapping_module.Table | None, Any]:
    """The mapping table and the conversion (``Port(convert=fn)``; else None), every override that
    does not fit, or a conversion that does not fit (no table then), recorded in ``found``."""
    if port.convert is None:
        overrides: list[ValueError] = []
        table = mapping_module.build(described, side.leaves, port.overrides, overrides)
        found.extend(overrides)
        return table, None
    from crosscheck._workloads.port.declare import convert

    made = found.run(convert.prepare, port, described, values, side)
    if made is None:
        return None, None
    conversion, rows = made
    return mapping_module.Table(tuple(rows)), conversion


def _stray(
    port: PortFields, described: Any, table: mapping_module.Table, found: problems_module.Problems
) -> None:
    """An ``unused`` pattern that matches no PyTorch parameter the port maps, or would map once the
    table's problems are fixed (not one left unmapped by an override), is a problem of ``found``."""
    unmapped = {e.torch.name for e in table.entries if e.status == "unmapped" and e.torch is not None}
    names = [t.name for t in described if t.kind == "parameter" and t.name not in unmapped]
    stray = [p for p in port.unused if not any(fnmatch.fnmatchcase(k, p) for k in names)]
    if stray:
        found.add(
            ValueError(
                f"`unused` pattern {stray[0]!r} matches no parameter of the PyTorch module (a name from "
                "its `named_parameters()`, or a glob pattern such as 'pooler.*')."
            )
        )


def refused_table(table: mapping_module.Table) -> str:
    """The table a refusal prints (its rows with a problem first), or nothing where it has none."""
    return table.refused() if table.problems() else ""


def mapping_problems(
    table: mapping_module.Table, parameters: Mapping[str, Any], torch: Any = None
) -> list[str]:
    """The mapping's problems, one line each: the table's, or, where it has none, a port with no
    PyTorch parameter mapped (nothing would be checked), with why where ``torch`` (the PyTorch module)
    says it: parameters that do not require grad are constants of the check, not parameters."""
    lines = table.problems()
    if not lines and not parameters:
        frozen = [n for n, p in getattr(torch, "named_parameters", list)() if not p.requires_grad]
        why = (
            f": the PyTorch module's {len(frozen)} parameter(s) (`{frozen[0]}`"
            f"{f' and {len(frozen) - 1} more' if len(frozen) > 1 else ''}) do not require grad "
            "(`requires_grad_(False)`), and crosscheck checks the gradients of those that do; call "
            "`requires_grad_(True)` on the module you pass (its values are unchanged)"
            if frozen
            else ""
        )
        lines = [
            f"no PyTorch parameter is mapped, so nothing would be checked{why}; print(port.mapping) "
            "shows the table."
        ]
    return lines


def _sides() -> tuple[Any, Any]:
    """The two sides' modules, imported when a port is first prepared (they import the frameworks; the
    conversion and the listed intermediates, imported after them, need nothing more)."""
    try:
        from crosscheck._workloads.port.sides import torch_side
    except ImportError as exc:
        raise ValueError(f"a Port needs torch: {describe(exc)}; {install_hint('all,port')}") from exc
    try:
        from crosscheck._workloads.port.sides import jax_side
    except ImportError as exc:
        raise ValueError(f"a Port needs jax: {describe(exc)}; {install_hint('all,port')}") from exc
    return torch_side, jax_side


def make_inputs(port: PortFields, rng: np.random.Generator, dtype: str) -> dict[str, np.ndarray]:
    """The port's inputs as NumPy arrays (floating-point ones in ``dtype``)."""
    where = f"port `{port.name}`"
    made = (
        user_call(where, "`inputs(rng, dtype)`", port.inputs, rng, dtype)
        if callable(port.inputs)
        else port.inputs
    )
    if not isinstance(made, Mapping) or not made:
        raise ValueError(f"port `{port.name}`: `inputs` must give a non-empty dict of name -> array.")
    out = {}
    for key, value in made.items():
        array = np.asarray(value.detach().cpu().numpy() if hasattr(value, "detach") else value)
        out[str(key)] = array.astype(dtype) if np.issubdtype(array.dtype, np.floating) else array.copy()
    return out


def jax_side_inputs(port: PortFields, inputs: dict[str, Any]) -> dict[str, Any]:
    """The JAX side's inputs: ``port.jax_inputs(inputs)`` (a layout change), or the same inputs."""
    return dict(port.jax_inputs(inputs)) if port.jax_inputs is not None else dict(inputs)


def port_loss(port: PortFields, layouts: Callable[[], tuple] = tuple) -> Callable[[Any], Any]:
    """The port's loss of the model's output: ``loss(output(out))`` as given; by default
    ``outputs_loss``, a fixed random projection of every floating-point array of the output (or of what
    ``output`` picks), so that every output reaches the loss (a custom ``loss`` alone gets the first),
    each drawn in PyTorch's layout (``layouts()``: the JAX side's, ``output_layouts``)."""
    if port.loss is not None:
        pick = port.output or _first
        chosen = port.loss
        return lambda out: chosen(pick(out))
    whole = port.output or (lambda out: out)
    return lambda out: outputs_loss(whole(out), seed=SEED, layouts=layouts())


def _first(output: Any) -> FrameworkArray | None:
    """The model's main output: its first floating-point array (``floating_outputs``), else itself."""
    found = floating_outputs(output)
    return found[0] if found else (output if hasattr(output, "shape") else None)


def _workload(prepared: Prepared) -> Workload:
    port = prepared.port
    found = problems_module.Problems(f"port `{port.name}`")
    found.refuse(
        mapping_problems(prepared.table, prepared.parameters, port.torch), refused_table(prepared.table)
    )
    shapes = {k: tuple(v.shape) for k, v in prepared.values.items() if k not in prepared.parameters}
    example = make_inputs(port, np.random.default_rng(0), "float32")
    torch_loss, jax_loss = torch_implementation(prepared), jax_implementation(prepared)

    def generate(rng: np.random.Generator, dtype: str) -> tuple[dict, dict]:
        params = {k: prepared.values[k] for k in prepared.parameters}
        tensors = {k: prepared.values[k] for k in shapes}
        return params, {**make_inputs(port, rng, dtype), **tensors}

    return Workload(
        name=port.name,
        parameters=prepared.parameters,
        inputs={**{k: v.shape for k, v in example.items()}, **shapes},
        implementations={"torch": torch_loss, "jax": jax_loss},
        generate=generate,
        description=port.description or f"port of {type(port.torch).__name__} to JAX",
    )


def torch_implementation(prepared: Prepared) -> Callable[[dict, dict], FrameworkArray]:
    """``(tensors, inputs) -> loss`` of the PyTorch module, its tensors replaced by the case's."""
    from crosscheck._workloads.port.sides import torch_device, torch_side

    loss = port_loss(prepared.port)

    def torch_loss(params: dict, inputs: dict) -> FrameworkArray:
        state = {**params, **prepared.torch_state(inputs)}
        return loss(torch_side.call(prepared.torch_side, state, prepared.user_inputs(inputs)))

    return torch_device.Homed(torch_loss, prepared.torch_side.m)  # its adapter says where it computes


def jax_leaves(
    prepared: Prepared, params: Mapping[str, Any], inputs: Mapping[str, Any]
) -> list[FrameworkArray]:
    """Every JAX leaf made from the PyTorch tensors through the mapping (``jnp`` ops: differentiable), or
    through the port's own conversion (``convert.Conversion.leaves``)."""
    import jax.numpy as jnp

    arrays = {**inputs, **params}
    if prepared.conversion is not None:
        return prepared.conversion.leaves(arrays)
    leaves = prepared.jax_side.leaves
    return [assemble.leaf(jnp, p, j.shape, arrays) for p, j in zip(prepared.pieces(), leaves, strict=True)]


def jax_implementation(prepared: Prepared) -> Callable[[dict, dict], FrameworkArray]:
    """``(params, inputs) -> loss`` of the JAX port, its leaves made from the PyTorch tensors; the
    default loss's projection drawn in PyTorch's layout (``output_layouts``)."""
    custom = prepared.port.loss is not None
    loss = port_loss(prepared.port, tuple if custom else lambda: output_layouts(prepared))

    def jax_loss(params: dict, inputs: dict) -> FrameworkArray:
        dtype = next(iter(params.values())).dtype
        leaves = jax_leaves(prepared, params, inputs)
        jax_in = jax_side_inputs(prepared.port, prepared.user_inputs(inputs))
        return loss(prepared.jax_side.forward(leaves, jax_in, dtype))

    return jax_loss


def output_layouts(prepared: Prepared) -> tuple:
    """The layouts reading the JAX output's arrays in PyTorch's (``layout.of``; found once)."""
    from crosscheck._workloads.port.declare import layout

    return layout.of(
        prepared, lambda: make_inputs(prepared.port, np.random.default_rng(0), "float32"), jax_leaves
    )


#: What every float64 pass of the PyTorch side does beyond casting the tensors (``torch_side.call``).
TORCH_FLOAT64 = (
    "float64 passes run with float64 as PyTorch's default dtype (torch.set_default_dtype, restored after): "
    "tensors the model creates without a dtype are float64 too"
)
