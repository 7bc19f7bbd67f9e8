"""The PyTorch side of a port: its tensors, its loss, and its modules' inputs and outputs.

Imported only when a port is used (it imports torch). The module is called with
``torch.func.functional_call``, so the arrays crosscheck passes (the case's parameters and buffers, in
the case's dtype) replace the module's own for that call only: the user's module is never changed.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch

from crosscheck._backends import handed
from crosscheck._workloads.port.mapping.matching import TORCH_LAYOUTS, Tensor, layout_of
from crosscheck._workloads.port.sides import torch_device
from crosscheck._workloads.port.sides.torch_device import on_device


@dataclasses.dataclass(frozen=True)
class ModuleCall:
    """One module call of a forward pass: its name (``h.0.ln_1``, ``#2`` for a second call), class,
    and its input and output arrays (float64 copies), in the order the calls finished; ``narrow`` when
    a floating output came back narrower than float64 (a module computing in float32 in a float64 run);
    ``note``: why the model's record stands alone, where its submodules could not be captured."""

    name: str
    module_type: str
    inputs: tuple[np.ndarray, ...]
    outputs: tuple[np.ndarray, ...]
    narrow: bool = False
    #: Why the model's own record stands alone (its submodule calls could not be captured): said.
    note: str = ""


def tensors(module: torch.nn.Module) -> tuple[list[Tensor], dict[str, np.ndarray]]:
    """The module's parameters (trainable or not) and persistent buffers, described and as arrays."""
    params = dict(module.named_parameters())
    buffers = dict(module.named_buffers())
    described, values = [], {}
    listed = {id(v): k for k, v in (*params.items(), *buffers.items())}
    for name, value in module.state_dict(keep_vars=True).items():
        tied = "" if name in params or name in buffers else listed.get(id(value), "")
        if (name not in params and name not in buffers) and not tied:
            continue
        owner = module.get_submodule(name.rsplit(".", 1)[0]) if "." in name else module
        kind = "parameter" if tied in params or (name in params and params[name].requires_grad) else "buffer"
        type_name, layout = layout_of([c.__name__ for c in type(owner).__mro__], TORCH_LAYOUTS)
        layout = layout if name.endswith("weight") else None
        described.append(
            Tensor(tuple(name.split(".")), tuple(value.shape), kind, type_name, layout, tied=tied)
        )
        if not tied:  # a tied alias (``lm_head.weight`` is ``wte.weight``): its tensor's values
            values[name] = value.detach().cpu().numpy().copy()
    return described, values


def to_torch(arrays: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
    return {k: tensor(v) for k, v in arrays.items()}


def shared(arrays: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
    """``share`` of each array: for arrays handed as private copies, as the engine's guarded call hands
    every array it passes."""
    return {k: share(v) for k, v in arrays.items()}


def share(array: np.ndarray, *, requires_grad: bool = False) -> torch.Tensor:
    """A tensor over ``array``'s own memory (``torch.from_numpy``: no copy), or a copy (``tensor``) where
    torch cannot wrap it (bfloat16, a read-only array, a negative stride).

    Only for an array nobody else holds (the engine's private copy of a call's argument, which it
    compares bit for bit after the call with what it was copied from): the module computes with it as
    with a copy, and ``call`` still finds a write into it (a copy of every parameter, 8 bytes
    each in a float64 pass, saved on each call)."""
    wrapped = _wrapped(array) if isinstance(array, np.ndarray) and array.flags.writeable else None
    out = wrapped if wrapped is not None else tensor(array)
    return out.requires_grad_() if requires_grad else out


def tensor(array: np.ndarray, *, requires_grad: bool = False) -> torch.Tensor:
    """A new tensor of ``array``'s dtype, one copy (a bfloat16 one, which torch cannot read from NumPy,
    through float32: exact)."""
    if array.dtype.name == "bfloat16":
        return torch.tensor(np.asarray(array, np.float32), dtype=torch.bfloat16, requires_grad=requires_grad)
    copy = np.array(array)  # private, its strides positive
    wrapped = _wrapped(copy)
    out = wrapped if wrapped is not None else torch.tensor(copy)
    return out.requires_grad_() if requires_grad else out


def _wrapped(array: np.ndarray) -> torch.Tensor | None:
    """``torch.from_numpy(array)``, None where torch cannot wrap it."""
    if array.dtype.name == "bfloat16":
        return None
    try:
        return torch.from_numpy(array)
    except (TypeError, ValueError):  # a dtype torch lacks, another byte order, a negative stride
        return None


def first_array(output: Any) -> Any:
    """The model's main output: the tensor, or the first tensor of a tuple, list or dict (ModelOutput)."""
    if isinstance(output, dict):
        output = list(output.values())
    if isinstance(output, (tuple, list)):
        for item in output:
            found = first_array(item)
            if found is not None:
                return found
        return None
    return output


class Wrapped(torch.nn.Module):
    """The user's module under ``m`` with the port's way of calling it: ``functional_call`` on this
    replaces the module's tensors for one call (a public API; the user's module is never changed)."""

    def __init__(self, module: torch.nn.Module, how: Callable[[torch.nn.Module, dict], Any]) -> None:
        super().__init__()
        self.m, self.how = module, how
        #: The inputs a forward wrote to in place (``call`` hands it copies: a note, not a failure).
        self.wrote: set[str] = set()
        #: A training-mode call that updates the running statistics (``torch_training.running``); every
        #: other call of a module in training mode uses batch statistics and writes nothing.
        self.track = False
        #: The proofs whose two calls differed within the side's rounding on a GPU (``proof``).
        self.reordered = 0

    def forward(self, inputs: dict[str, Any]) -> Any:
        if self.track or not self.m.training:
            return self.how(self.m, inputs)
        from crosscheck._workloads.port.sides.torch_training import untracked

        with untracked(self.m):
            return self.how(self.m, inputs)


def call(wrapped: Wrapped, state: dict[str, Any], inputs: dict[str, Any]) -> Any:
    """The wrapped module's output with ``state`` (name -> tensor) in place of its own tensors.

    A float64 pass runs with float64 as PyTorch's default dtype: a model that
    builds a tensor without a dtype (Hugging Face CLIP's causal mask, ``torch.full(..., finfo(dtype).min)``)
    would otherwise mix a float32 tensor into a float64 pass, or fail to build it at all. The report's case
    says so (``torch_float64``).

    Each call is handed its own copy of the inputs: a model may write to its input in place (Hugging
    Face's XGLM does ``position_ids += self.offset``) and still compute a function of it; the write is
    noted on ``wrapped.wrote``, by the input's name. A write to a parameter or a buffer raises
    ``Misbehaved``: the next call would compute with other weights."""
    watched = _watch(wrapped.m, state)
    own = {k: _copied(v) for k, v in inputs.items()}
    state, own = on_device(wrapped.m, state, own)
    with _default_dtype(_floating_dtype(state)):
        out = torch.func.functional_call(wrapped, {f"m.{k}": v for k, v in state.items()}, (own,))
    _unchanged(watched)
    wrapped.wrote.update(k for k, v in inputs.items() if not _same(flat(v), flat(own[k])))
    return out


def _copied(value: Any) -> Any:
    """``value`` with a copy of each tensor in it (tuples, lists, dicts), autograd's path kept."""
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, dict):
        return {k: _copied(v) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return type(value)(_copied(v) for v in value)
    return value


def _same(before: list[torch.Tensor], after: list[torch.Tensor]) -> bool:
    """Whether the copies ``after`` still hold the bits of ``before`` (a write to one says not)."""
    return all(_equal(_bits(a.detach()), _bits(b.detach())) for a, b in zip(before, after, strict=True))


class Misbehaved(RuntimeError):
    """The PyTorch module changed a parameter or a buffer it was given, or gave another result on a
    second call: the PyTorch side's own failure, never the port's."""


#: What a PyTorch forward must not do, and what it did: the end of a ``Misbehaved`` message.
RULE = "a forward must leave its parameters and buffers as they were (compared bit for bit)"
_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _watch(module: torch.nn.Module, state: dict[str, Any]) -> list[tuple]:
    """``(what, tensor, unchanged)`` of every parameter and buffer handed to the module:
    ``unchanged()`` tells whether it still holds its bits of now."""
    params = {name for name, _ in module.named_parameters()}
    whats = [
        (f"changes its parameter `{k}`" if k in params else f"updates its buffer `{k}` in place", v)
        for k, v in state.items()
    ]
    return [(what, t, _kept(t)) for what, value in whats for t in flat(value)]


def _kept(t: torch.Tensor) -> Callable[[], bool]:
    """Whether ``t`` will still hold what it holds now (a function of no argument). A tensor over the
    memory of an array the engine's guarded call handed (``share`` of its private copy) is tested as
    the engine tests that array after the call, against what it was copied or cast from
    (``handed.test_of``): no copy of it (4 or 8 bytes a parameter on each forward pass);
    another tensor is copied now and compared bit for bit after."""
    try:
        test = handed.test_of(t.detach().numpy())
    except (RuntimeError, TypeError, ValueError):  # bfloat16, a tensor under vmap: not an array handed
        test = None
    if test is not None:
        return test
    copy = _copy(t)
    return lambda: _equal(_bits(copy), _bits(t.detach()))


def _copy(t: torch.Tensor) -> torch.Tensor:
    """What ``t`` holds now, in memory of its own: copied by NumPy where ``t`` is a plain CPU tensor
    NumPy can read (0.07 to 0.09 s against ``clone``'s 0.19 to 0.25 s for a 300 MB float64 table on
    this project's 2-core machine), else by ``clone`` (bfloat16, a tensor under vmap)."""
    try:
        return torch.from_numpy(np.array(t.detach().numpy()))
    except (RuntimeError, TypeError, ValueError):
        return t.detach().clone()


def _unchanged(watched: list[tuple]) -> None:
    for what, _, unchanged in watched:
        if not unchanged():
            raise Misbehaved(f"the PyTorch module (`torch`) {what} during its forward; {RULE}")


def _equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bit for bit; True where the bits cannot be compared: under ``torch.func.vmap`` (the oracle's
    batched losses) ``torch.equal`` has no batching rule and raises, and the same module's unbatched
    calls (``proof``, the gradients) are the ones checked. Only public API: no private batched-tensor
    test."""
    try:
        return bool(torch.equal(a, b))
    except RuntimeError:
        return True


def _bits(t: torch.Tensor) -> torch.Tensor:
    """``t`` as integers of its width (floating point): -0.0 differs from 0.0, and NaN equals itself."""
    return t.view(_BITS[t.element_size()]) if t.is_floating_point() else t


def proof(
    loss: Callable[..., Any], params: dict[str, np.ndarray], inputs: dict[str, np.ndarray], wrapped: Wrapped
) -> list[str]:
    """The PyTorch side's loss, called twice at the point (new tensors each time, over the guarded
    call's private arrays, without autograd): ``call`` finds a write to a parameter or a buffer, and the
    two losses must be the same bit for bit (a CPU forward is deterministic): a module that keeps state
    between calls (a counter, a cache, a buffer it updates, dropout in training mode) raises
    ``Misbehaved``. On a GPU, whose sums may be made in another order each call (``reorders``), two
    losses within the side's own rounding are its nondeterminism: counted on ``wrapped`` and said, not
    refused; beyond that rounding they are refused as anywhere. Returns the inputs its forward writes to
    in place (``wrapped``'s, which ``loss`` calls): each call has its own copy of them, so that is a note,
    not a failure."""
    with torch.no_grad():  # the arrays are the guarded call's private copies: shared, not copied
        values = [loss(shared(params), shared(inputs)) for _ in range(2)]
    first, second = (_scalar(v) for v in values)
    if first.tobytes() == second.tobytes():
        return sorted(wrapped.wrote)
    dtype = str(getattr(values[0], "dtype", "float64")).removeprefix("torch.")
    if torch_device.reordered(wrapped.m, first, second, dtype):
        wrapped.reordered += 1
        return sorted(wrapped.wrote)
    raise Misbehaved(
        f"the PyTorch module (`torch`) gives another result on its second call (loss {_show(first)}, "
        f"then {_show(second)}): it keeps state between calls (a counter, a cache, a buffer it updates, "
        "dropout in training mode); a forward must give the same result every call (compared bit for "
        f"bit){torch_device.offer(wrapped.m)}"
    )


def _scalar(value: Any) -> np.ndarray:
    return np.asarray(value.detach().cpu().double() if isinstance(value, torch.Tensor) else value)


def _show(value: np.ndarray) -> str:
    return f"{float(value.ravel()[0]):.9g}" if value.size else "empty"


def _floating_dtype(state: dict[str, Any]) -> torch.dtype | None:
    """The dtype of the first floating tensor in ``state`` (the case's dtype), None without one."""
    floating = (v.dtype for v in state.values() if isinstance(v, torch.Tensor) and v.is_floating_point())
    return next(floating, None)


@contextlib.contextmanager
def _default_dtype(dtype: torch.dtype | None) -> Iterator[None]:
    """PyTorch's default dtype set to float64 for a float64 pass, restored after; anything else as is."""
    before = torch.get_default_dtype()
    if dtype != torch.float64 or before == dtype:
        yield
        return
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(before)


def flat(value: Any) -> list[torch.Tensor]:
    """The tensors in a module's input or output (tuples, lists, dicts, ModelOutputs), in order."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (tuple, list)):
        return [t for item in value for t in flat(item)]
    return []


def capture(wrapped: Wrapped, state: dict[str, Any], inputs: dict[str, Any]) -> list[ModuleCall]:
    """Every submodule call of one forward pass (forward hooks, removed after), without autograd."""
    records: list[ModuleCall] = []
    seen: dict[str, int] = {}

    def hook(name: str) -> Callable:
        def record(mod: torch.nn.Module, args: Any, kwargs: Any, output: Any) -> None:
            seen[name] = seen.get(name, 0) + 1
            label = name if seen[name] == 1 else f"{name}#{seen[name]}"
            arrays = [_numpy(t) for t in flat((args, kwargs))]
            outputs = tuple(_numpy(t) for t in flat(output))
            records.append(
                ModuleCall(label, type(mod).__name__, tuple(arrays), outputs, _narrow(flat(output)))
            )

        return record

    skipped = left_out(wrapped.m)
    named = [(n, m) for n, m in wrapped.m.named_modules() if n and not _under(n, skipped)]
    handles = [m.register_forward_hook(hook(n), with_kwargs=True) for n, m in named]
    try:
        with torch.no_grad():
            top = call(wrapped, state, inputs)
    finally:
        for h in handles:
            h.remove()
    outputs = tuple(_numpy(t) for t in flat(top))
    records.append(ModuleCall("", type(wrapped.m).__name__, (), outputs, _narrow(flat(top))))
    return records


def left_out(module: torch.nn.Module) -> tuple[str, ...]:
    """The modules whose calls are not captured: parametrizations (``torch.nn.utils.parametrize``,
    weight norm's ``parametrizations.weight``), whose "output" is the weight they compute, not an
    activation; the module that uses the weight is captured and compared."""
    return tuple(
        n for n, m in module.named_modules() if isinstance(m, torch.nn.utils.parametrize.ParametrizationList)
    )


def left_out_note(module: torch.nn.Module) -> str:
    """The verdict's note on the modules ``left_out`` ("" when none is)."""
    names = left_out(module)
    if not names:
        return ""
    shown = ", ".join(f"`{n}`" for n in names)
    return (
        f"; not compared: {shown} (a ParametrizationList: its output is the weight it computes, not an "
        f"activation; the module that uses the weight is compared)"
    )


def _under(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def _narrow(tensors: Any) -> bool:
    return any(t.is_floating_point() and t.dtype.itemsize < 8 for t in tensors)


def _numpy(t: torch.Tensor) -> np.ndarray:
    t = t.detach().cpu()
    out = (t.float() if t.dtype == torch.bfloat16 else t).numpy()
    return out.astype(np.float64) if np.issubdtype(out.dtype, np.floating) else out.copy()


def unreached(
    loss: Callable[..., Any], params: dict[str, np.ndarray], inputs: dict[str, np.ndarray]
) -> list[str]:
    """The parameters from which PyTorch's autograd has no path to the loss (``loss(params, inputs)``, as
    a workload's): their gradient is zero because the loss does not use them, not by construction."""
    leaves = {k: share(v, requires_grad=True) for k, v in params.items()}  # private copies: shared
    out = loss(leaves, shared(inputs))
    if not isinstance(out, torch.Tensor) or not out.requires_grad:
        return list(leaves)
    grads = torch.autograd.grad(out, list(leaves.values()), allow_unused=True)
    return [k for k, g in zip(leaves, grads, strict=True) if g is None]
