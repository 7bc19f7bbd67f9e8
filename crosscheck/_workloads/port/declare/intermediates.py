"""The user-listed intermediates of an Equinox or plain-function port (``Port(jax_intermediates=...)``),
checked when the port is prepared, before any numerics.

A linen or nnx module's submodule calls are captured through Flax; other JAX code cannot be intercepted
reliably (Equinox layers run under ``jax.vmap``, where a wrapped ``__call__`` sees tracers that cannot
leave the transform), so the user lists which PyTorch modules' outputs the JAX forward pass returns
beside its own. Each listed name must be a PyTorch module that the forward pass calls (``name#2``: its
second call); the JAX call, traced once with ``jax.eval_shape`` on the example inputs, must return
``(output, {name: array})`` with exactly the listed names, and each array must have the shape of the
PyTorch module's output (or its channels-last layout), or a shape that broadcasts one into the other
(compared after broadcasting, as a linen or nnx module's outputs are). A name with one ``*``
(``layers.*.linear``) stands for the modules ``layers.0.linear`` to ``layers.{L-1}.linear``: the JAX
call returns ONE array ``(L, ...)`` for it (a scan's per-step outputs), its leading axis the layers,
split into one record per layer. Every problem is found, not only the first (the port's refusal says
them all, with the mapping's: ``problems``), each one line: a ``ValueError``, or a ``TypeError`` for a
value of the wrong type.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from crosscheck._errors import UserCodeFailed, describe, reraise_user_interrupt
from crosscheck._workloads.port.declare import layout
from crosscheck._workloads.port.declare.fields import PortFields
from crosscheck._workloads.port.sides import jax_side as jax_side_module
from crosscheck._workloads.port.sides import torch_side as torch_side_module

#: How a problem of the listing starts (``problems.Problems`` puts the port's name before it).
WHERE = "`jax_intermediates`"


def check(
    port: PortFields, side: Any, wrapped: Any, values: dict, example: dict, jax_example: dict
) -> list[ValueError | TypeError]:
    """The problems of the listed intermediates, every one found (none: they are sound), each a
    ``ValueError`` (a ``TypeError`` for a value of the wrong type) of one line that does not name the
    port (``problems.Problems`` does); a forward pass that fails on the example inputs is a
    ``UserCodeFailed``. Each side is checked as far as it can be: a name PyTorch does not know is
    said, and the JAX side's names and the other shapes are still checked."""
    names = tuple(port.jax_intermediates or ())
    if not names:
        return []
    if side.kind in ("linen", "nnx"):
        return [
            ValueError(
                f"{WHERE} is for an Equinox module or a function; a Flax {side.kind} module's submodule "
                f"outputs are captured without it."
            )
        ]
    problems: list[ValueError | TypeError] = []
    layers = {}
    for name in names:
        try:
            layers[name] = _layers(port, name)
        except ValueError as exc:
            problems.append(exc)
    wanted = tuple(k for n in names if n in layers for k in layers[n])
    torch_shapes = _torch_shapes(port, wrapped, values, example, wanted, problems)
    jax_shapes = _jax_shapes(port, side, jax_example, problems)
    for name in (n for n in names if n in layers and n in jax_shapes):
        problems += _compared(name, layers[name], jax_shapes[name], torch_shapes)
    return problems


def _compared(
    name: str, layers: list[str], j: tuple[int, ...], torch_shapes: dict[str, tuple[str, tuple[int, ...]]]
) -> list[ValueError | TypeError]:
    """The problems of one listed name's JAX shape against its PyTorch modules' outputs (a stacked
    array ``(L, ...)``: each layer's part against its module)."""
    if "*" in name and (not j or j[0] != len(layers)):
        return [
            ValueError(
                f"{WHERE}: `{name}` has shape {j} on the JAX side, its leading axis the layers; PyTorch "
                f"has {len(layers)} modules `{layers[0]}` to `{layers[-1]}`."
            )
        ]
    for layer in (k for k in layers if k in torch_shapes):
        t, shape = torch_shapes[layer], j[1:] if "*" in name else j
        if not _fits(shape, t[1]):
            said = f"`{name}` has shape {j} on the JAX side" + (f", layer {layer}: {shape}" * ("*" in name))
            return [ValueError(f"{WHERE}: {said}; PyTorch's `{layer}` ({t[0]}) outputs {t[1]}.")]
    return []


def _fits(shape: tuple[int, ...], torch_shape: tuple[int, ...]) -> bool:
    """Whether a JAX array of ``shape`` is compared with PyTorch's ``torch_shape`` (as
    ``localize.compare_arrays`` compares module outputs): a layout of it (``layout.candidates``: its
    axes permuted, adjacent ones merged or split, the values deciding when compared), or it or its
    channels-last layout broadcasting one into the other (``(1, S, H)`` against ``(B, S, H)``, ``(4, 6,
    8)`` against ``(6, 8)``); not shapes whose common shape is neither (``(B, 1)`` against ``(B,)``)."""
    if layout.candidates(shape, torch_shape):
        return True
    moved = (shape[0], shape[-1], *shape[1:-1]) if len(shape) >= 3 else shape
    for candidate in (shape, moved):
        try:
            common = np.broadcast_shapes(candidate, torch_shape)
        except ValueError:
            continue
        if common in (candidate, torch_shape):
            return True
    return False


def _layers(port: PortFields, name: str) -> list[str]:
    """The PyTorch modules a listed name stands for: itself, or for a pattern ``layers.*.linear`` (one
    ``*``, a layer index) the modules ``layers.0.linear`` to ``layers.{L-1}.linear``, in order.

    Raises:
        ValueError: a pattern with several ``*``, or whose modules are not numbered ``0 .. L-1``.
    """
    if "*" not in name:
        return [name]
    if name.count("*") != 1:
        raise ValueError(
            f"{WHERE}: `{name}` has {name.count('*')} `*`; a stacked name has one, the layer index."
        )
    before, after = (re.escape(part) for part in name.split("*"))
    found = {}
    for module, _ in port.torch.named_modules():
        matched = re.fullmatch(f"{before}(\\d+){after}", module)
        if matched is not None:
            found[int(matched.group(1))] = module
    if not found or sorted(found) != list(range(len(found))):
        raise ValueError(
            f"{WHERE}: `{name}` stands for PyTorch modules numbered 0 to L-1 where `*` is, found "
            f"{[found[k] for k in sorted(found)] or 'none'}."
        )
    return [found[k] for k in sorted(found)]


def _torch_shapes(
    port: PortFields,
    wrapped: Any,
    values: dict,
    example: dict,
    names: tuple[str, ...],
    problems: list[ValueError | TypeError],
) -> dict[str, tuple[str, tuple[int, ...]]]:
    """Listed name -> (module class, shape of its first output array) from one PyTorch forward pass,
    for the names that have one (what stops one name is appended to ``problems``)."""
    modules = {n: type(m).__name__ for n, m in port.torch.named_modules() if n}
    known = ", ".join(list(modules)[:12]) + (f" and {len(modules) - 12} more" if len(modules) > 12 else "")
    for unknown in (n for n in names if n.split("#")[0] not in modules):
        problems.append(
            ValueError(
                f"{WHERE} names `{unknown}`, which is not a PyTorch module (its modules: {known or 'none'})."
            )
        )
    names = tuple(n for n in names if n.split("#")[0] in modules)
    if not names:
        return {}
    floats = {
        k: v.astype(np.float32) if np.issubdtype(v.dtype, np.floating) else v for k, v in values.items()
    }
    state = torch_side_module.to_torch(floats)  # in the example inputs' dtype
    try:
        records = torch_side_module.capture(wrapped, state, torch_side_module.to_torch(example))
    except BaseException as exc:  # the user's module (its sys.exit too): one line, not a traceback
        reraise_user_interrupt(exc)
        failed = UserCodeFailed(
            f"port `{port.name}`: the PyTorch forward pass failed on the example inputs: "
            f"{describe(exc, 'the PyTorch forward pass')}"
        )
        failed.__cause__ = exc
        problems.append(failed)
        return {}
    found = {r.name: r for r in records}
    out = {}
    for name in names:
        record = found.get(name)
        if record is None:
            calls = sum(1 for r in records if r.name.split("#")[0] == name.split("#")[0])
            problems.append(
                ValueError(
                    f"{WHERE} names `{name}`, but the PyTorch forward pass calls "
                    f"`{name.split('#')[0]}` {calls} time(s)."
                )
            )
        elif not record.outputs:
            problems.append(ValueError(f"{WHERE} names `{name}`, whose PyTorch output holds no tensor."))
        else:
            out[name] = (record.module_type, tuple(record.outputs[0].shape))
    return out


def _jax_shapes(
    port: PortFields, side: Any, jax_example: dict, problems: list[ValueError | TypeError]
) -> dict[str, tuple[int, ...]]:
    """Listed name -> the shape of the array the JAX call returns for it (traced, not computed), for
    the names it returns as arrays (what is wrong is appended to ``problems``)."""
    seen: dict[str, Any] = {}

    def forward(leaves: list) -> dict:
        got = side.run(leaves, jax_example, jnp.float32)
        seen["got"] = jax_side_module.shape_of(got)
        if not (isinstance(got, tuple) and len(got) == 2 and isinstance(got[1], Mapping)):
            return {}
        seen["names"] = [str(k) for k in got[1]]
        seen["types"] = {str(k): type(v).__name__ for k, v in got[1].items()}
        return {str(k): v for k, v in got[1].items() if isinstance(v, (jax.Array, np.ndarray))}

    structs = [jax.ShapeDtypeStruct(leaf.shape, jnp.float32) for leaf in side.leaves]
    try:
        shapes = jax.eval_shape(forward, structs)
    except BaseException as exc:  # the user's code, traced (its sys.exit too): one line, not a traceback
        reraise_user_interrupt(exc)
        failed = UserCodeFailed(
            f"port `{port.name}`: the JAX forward pass failed on the example inputs: "
            f"{describe(exc, 'the JAX forward pass')}"
        )
        failed.__cause__ = exc
        problems.append(failed)
        return {}
    if "names" not in seen:
        problems.append(
            TypeError(
                f"{WHERE}: the JAX call must return (output, {{PyTorch module name: array}}), found "
                f"{seen.get('got', 'nothing')}."
            )
        )
        return {}
    listed = tuple(port.jax_intermediates or ())
    missing = [n for n in listed if n not in seen["names"]]
    extra = [n for n in seen["names"] if n not in listed]
    if missing or extra:
        what = [f"no {_names(missing)}"] if missing else []
        what += [f"{_names(extra)}, which {'is' if len(extra) == 1 else 'are'} not listed"] if extra else []
        problems.append(
            ValueError(
                f"{WHERE} lists {list(listed)}; the JAX call returned {' but '.join(what)} (its names: "
                f"{seen['names']})."
            )
        )
    for bad in (n for n in listed if n in seen["names"] and n not in shapes):
        problems.append(TypeError(f"{WHERE}: `{bad}` must be an array, found {seen['types'][bad]}."))
    return {n: tuple(int(d) for d in shapes[n].shape) for n in listed if n in shapes}


def _names(names: list[str]) -> str:
    """Names in backticks, said as a list: ``a``; ``a`` and ``b``; ``a``, ``b`` and ``c``."""
    quoted = [f"`{n}`" for n in names]
    return quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} and {quoted[-1]}"
