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
split into one record per layer. Every failure is one line: a ``ValueError``, or a ``TypeError`` for a
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
from crosscheck._workloads.port import jax_side as jax_side_module
from crosscheck._workloads.port import torch_side as torch_side_module
from crosscheck._workloads.port.fields import PortFields


def check(port: PortFields, side: Any, wrapped: Any, values: dict, example: dict, jax_example: dict) -> None:
    """Raise a one-line ``ValueError``/``TypeError`` unless the listed intermediates are sound."""
    names = tuple(port.jax_intermediates or ())
    if not names:
        return
    where = f"port `{port.name}`: `jax_intermediates`"
    if side.kind in ("linen", "nnx"):
        raise ValueError(
            f"{where} is for an Equinox module or a function; a Flax {side.kind} module's submodule "
            f"outputs are captured without it."
        )
    layers = {n: _layers(port, n) for n in names}
    torch_shapes = _torch_shapes(port, wrapped, values, example, tuple(k for n in names for k in layers[n]))
    jax_shapes = _jax_shapes(port, side, jax_example)
    for name in names:
        j = jax_shapes[name]
        if "*" in name and (not j or j[0] != len(layers[name])):
            raise ValueError(
                f"{where}: `{name}` has shape {j} on the JAX side, its leading axis the layers; PyTorch "
                f"has {len(layers[name])} modules `{layers[name][0]}` to `{layers[name][-1]}`."
            )
        for layer in layers[name]:  # a stacked array (L, ...): each layer's part against its module
            t, shape = torch_shapes[layer], j[1:] if "*" in name else j
            if not _fits(shape, t[1]):
                said = f"`{name}` has shape {j} on the JAX side" + (
                    f", layer {layer}: {shape}" * ("*" in name)
                )
                raise ValueError(f"{where}: {said}; PyTorch's `{layer}` ({t[0]}) outputs {t[1]}.")


def _fits(shape: tuple[int, ...], torch_shape: tuple[int, ...]) -> bool:
    """Whether a JAX array of ``shape`` is compared with PyTorch's ``torch_shape`` (as
    ``localize.compare_arrays`` compares module outputs): the same shape or its channels-last layout, or
    either of them broadcasting one into the other (``(1, S, H)`` against ``(B, S, H)``, ``(4, 6, 8)``
    against ``(6, 8)``); not shapes whose common shape is neither (``(B, 1)`` against ``(B,)``)."""
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
    where = f"port `{port.name}`: `jax_intermediates`"
    if name.count("*") != 1:
        raise ValueError(
            f"{where}: `{name}` has {name.count('*')} `*`; a stacked name has one, the layer index."
        )
    before, after = (re.escape(part) for part in name.split("*"))
    found = {}
    for module, _ in port.torch.named_modules():
        matched = re.fullmatch(f"{before}(\\d+){after}", module)
        if matched is not None:
            found[int(matched.group(1))] = module
    if not found or sorted(found) != list(range(len(found))):
        raise ValueError(
            f"{where}: `{name}` stands for PyTorch modules numbered 0 to L-1 where `*` is, found "
            f"{[found[k] for k in sorted(found)] or 'none'}."
        )
    return [found[k] for k in sorted(found)]


def _torch_shapes(
    port: PortFields, wrapped: Any, values: dict, example: dict, names: tuple[str, ...]
) -> dict[str, tuple[str, tuple[int, ...]]]:
    """Listed name -> (module class, shape of its first output array) from one PyTorch forward pass."""
    where = f"port `{port.name}`: `jax_intermediates`"
    modules = {n: type(m).__name__ for n, m in port.torch.named_modules() if n}
    unknown = next((n for n in names if n.split("#")[0] not in modules), None)
    if unknown is not None:
        known = ", ".join(list(modules)[:12]) + (
            f" and {len(modules) - 12} more" if len(modules) > 12 else ""
        )
        raise ValueError(
            f"{where} names `{unknown}`, which is not a PyTorch module (its modules: {known or 'none'})."
        )
    floats = {
        k: v.astype(np.float32) if np.issubdtype(v.dtype, np.floating) else v for k, v in values.items()
    }
    state = torch_side_module.to_torch(floats)  # in the example inputs' dtype
    try:
        records = torch_side_module.capture(wrapped, state, torch_side_module.to_torch(example))
    except BaseException as exc:  # the user's module (its sys.exit too): one line, not a traceback
        reraise_user_interrupt(exc)
        raise UserCodeFailed(
            f"port `{port.name}`: the PyTorch forward pass failed on the example inputs: "
            f"{describe(exc, 'the PyTorch forward pass')}"
        ) from exc
    found = {r.name: r for r in records}
    out = {}
    for name in names:
        record = found.get(name)
        if record is None:
            calls = sum(1 for r in records if r.name.split("#")[0] == name.split("#")[0])
            raise ValueError(
                f"{where} names `{name}`, but the PyTorch forward pass calls "
                f"`{name.split('#')[0]}` {calls} time(s)."
            )
        if not record.outputs:
            raise ValueError(f"{where} names `{name}`, whose PyTorch output holds no tensor.")
        out[name] = (record.module_type, tuple(record.outputs[0].shape))
    return out


def _jax_shapes(port: PortFields, side: Any, jax_example: dict) -> dict[str, tuple[int, ...]]:
    """Listed name -> the shape of the array the JAX call returns for it (traced, not computed)."""
    where = f"port `{port.name}`: `jax_intermediates`"
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
        raise UserCodeFailed(
            f"port `{port.name}`: the JAX forward pass failed on the example inputs: "
            f"{describe(exc, 'the JAX forward pass')}"
        ) from exc
    if "names" not in seen:
        raise TypeError(
            f"{where}: the JAX call must return (output, {{PyTorch module name: array}}), found "
            f"{seen.get('got', 'nothing')}."
        )
    listed = tuple(port.jax_intermediates or ())
    missing = next((n for n in listed if n not in seen["names"]), None)
    extra = next((n for n in seen["names"] if n not in listed), None)
    if missing is not None or extra is not None:
        what = f"no `{missing}`" if missing is not None else f"`{extra}`, which is not listed"
        raise ValueError(
            f"{where} lists {list(listed)}; the JAX call returned {what} (its names: {seen['names']})."
        )
    bad = next((n for n in listed if n not in shapes), None)
    if bad is not None:
        raise TypeError(f"{where}: `{bad}` must be an array, found {seen['types'][bad]}.")
    return {n: tuple(int(d) for d in shapes[n].shape) for n in listed}
