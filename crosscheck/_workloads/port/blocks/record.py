"""The recording of a blockwise check (``blocks.Blocks``): one PyTorch forward pass records each block's
inputs, one backward pass the cotangent reaching each block's output, and each block's are saved in a
file of its own (``.npz``, read back without pickle), so that a block is checked from its file alone:
here, one after the other, or on a Dask worker that holds that block only.

A block's file holds its array inputs (``input/NAME``), its output's cotangents (``cotangent/I``, one
per floating-point array of its output, ``losses.floating_outputs``), its weights, output and gradient
when a worker builds the block itself (``weight/NAME``, its ``state_dict``; ``output/I`` and
``backward/weight/NAME``, ``backward/input/NAME``: what the rebuilt block must reproduce,
``proof.prove_rebuilt``), and ``meta``: JSON text of what else it was called with (``None``, booleans,
numbers, strings), how often it was called and how its check's loss is made (``cotangent``). An
argument that is a tuple or list of arrays (Llama's ``position_embeddings=(cos, sin)``) is kept as one
array input a member, ``NAME[0]``, ``NAME[1]``, ... (``meta`` keeps how many), and given back to the
PyTorch block as a tuple.
"""

from __future__ import annotations

import inspect
import json
import os
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch

from crosscheck._errors import describe, reraise_user_interrupt, user_call
from crosscheck._types import PyTree, TorchModule
from crosscheck._workloads.losses import floating_outputs, outputs_loss
from crosscheck._workloads.port.blocks.declare import Blocks
from crosscheck._workloads.port.blocks.proof import backward, numpy_of, prove_rebuilt
from crosscheck._workloads.port.blocks.recorded import Recorded
from crosscheck._workloads.port.declare.build import SEED

#: What a block may be called with besides arrays: kept as JSON in its file.
PLAIN = (type(None), bool, int, float, str)


def record(blocks: Blocks, model: Any, directory: str, *, seed: int, weights: bool) -> list[dict[str, Any]]:
    """Run the model (``blocks.model()``) forward (and backward, for ``cotangent="model"``) once and
    save each block's file in ``directory``; return one entry per block in the order the forward pass
    first calls them, ``{"index", "block", "path", "problem"}`` (``path`` None and ``problem`` said
    for a block that could not be recorded: never called, or called with what a file cannot hold).

    Raises:
        ValueError: the model, its inputs or its forward pass failed; ``blocks`` matches no module.
    """
    names = blocks.matching([n for n, _ in model.named_modules()])
    where = f"blocks `{blocks.name}`"
    inputs = _model_inputs(blocks, model, seed)
    seen: dict[str, dict[str, Any]] = {}
    order: list[str] = []
    handles = []
    for name in names:
        module = model.get_submodule(name)
        handles.append(module.register_forward_pre_hook(_pre_hook(name, seen, order), with_kwargs=True))
        handles.append(module.register_forward_hook(_post_hook(name, seen)))
    how = blocks.torch_call or (lambda m, i: m(**i))
    wanted = blocks.cotangent == "model"
    try:
        with torch.enable_grad() if wanted else torch.no_grad():
            output = user_call(where, "the PyTorch model's forward pass", how, model, inputs)
            if wanted:
                user_call(where, "the PyTorch model's backward pass", _cotangents, output, seen)
    finally:
        for handle in handles:
            handle.remove()
    entries = []
    for index, name in enumerate([*order, *(n for n in names if n not in seen)]):
        entry: dict[str, Any] = {"index": index, "block": name, "path": None, "problem": None}
        got = seen.get(name)
        if got is None or got.get("problem"):
            entry["problem"] = got["problem"] if got else "the model's forward pass never called it"
        else:
            module = model.get_submodule(name) if weights else None
            entry["path"] = _save(directory, (index, name), got, module, blocks.cotangent)
        entries.append(entry)
    return entries


def _model_inputs(blocks: Blocks, model: Any, seed: int) -> dict[str, Any]:
    """The model's inputs as tensors (a function's made with ``seed``), floating-point ones in the dtype
    of the model's floating-point parameters (float32 when it has none)."""
    where = f"blocks `{blocks.name}`"
    dtype = next((p.dtype for p in model.parameters() if p.is_floating_point()), torch.float32)
    name = str(dtype).removeprefix("torch.")
    made = (
        user_call(where, "`inputs(rng, dtype)`", blocks.inputs, np.random.default_rng(seed), name)
        if callable(blocks.inputs)
        else blocks.inputs
    )
    if not isinstance(made, Mapping) or not made:
        raise ValueError(f"{where}: `inputs` must give a non-empty dict of name -> array.")
    out = {}
    for key, value in made.items():
        tensor = value if isinstance(value, torch.Tensor) else torch.as_tensor(np.asarray(value))
        out[str(key)] = tensor.to(dtype) if tensor.is_floating_point() else tensor
    return out


def _pre_hook(
    name: str, seen: dict[str, dict[str, Any]], order: list[str]
) -> Callable[[TorchModule, tuple, dict], None]:
    def hook(module: TorchModule, args: tuple, kwargs: dict) -> None:
        if name in seen:
            seen[name]["calls"] += 1
            return
        order.append(name)
        seen[name] = {"calls": 1, **_arguments(module, args, kwargs)}

    return hook


def _post_hook(name: str, seen: dict[str, dict[str, Any]]) -> Callable[[TorchModule, tuple, PyTree], None]:
    def hook(module: TorchModule, args: tuple, output: PyTree) -> None:
        if seen[name]["calls"] == 1:
            seen[name]["outputs"] = floating_outputs(output)
            # its values now: the model may yet write to them in place
            seen[name]["values"] = [numpy_of(a) for a in seen[name]["outputs"]]
            if not seen[name]["outputs"] and not seen[name].get("problem"):
                seen[name]["problem"] = "its output holds no floating-point array"

    return hook


def _arguments(module: Any, args: tuple, kwargs: dict) -> dict[str, Any]:
    """A call's arguments by name: arrays (copied) and plain values; ``problem`` for anything else."""
    try:
        bound = inspect.signature(module.forward).bind(*args, **kwargs)
    except (TypeError, ValueError) as exc:
        return {"problem": f"its arguments cannot be named by its signature: {describe(exc)}"}
    arrays: dict[str, np.ndarray] = {}
    constants: dict[str, Any] = {}
    tuples: dict[str, int] = {}
    parameters = inspect.signature(module.forward).parameters
    for key, value in bound.arguments.items():
        kind = parameters[key].kind
        if kind is inspect.Parameter.VAR_POSITIONAL and value:
            return {"problem": f"it is called with positional arguments `*{key}`, which have no names"}
        items = value.items() if kind is inspect.Parameter.VAR_KEYWORD else [(key, value)]
        for k, v in items:
            if isinstance(v, torch.Tensor):
                arrays[k] = v.detach().cpu().numpy().copy()
            elif isinstance(v, PLAIN):
                constants[k] = v
            elif isinstance(v, (tuple, list)) and v and all(isinstance(t, torch.Tensor) for t in v):
                tuples[k] = len(v)
                arrays.update({member(k, i): t.detach().cpu().numpy().copy() for i, t in enumerate(v)})
            else:
                problem = f"its argument `{k}` is a {type(v).__name__}, neither an array nor a plain value"
                return {"problem": problem + " (a cache? build the model with use_cache=False)"}
    return {"inputs": arrays, "constants": constants, "tuples": tuples}


def member(name: str, i: int) -> str:
    """The input name of member ``i`` of a tuple argument ``name``: ``name[i]``."""
    return f"{name}[{i}]"


def _cotangents(output: Any, seen: dict[str, dict[str, Any]]) -> None:
    """The gradient of the model's check loss (a port's default: ``outputs_loss``) with respect to each
    block's output arrays, stored as the blocks' ``cotangents`` (zeros where the loss does not reach)."""
    loss = outputs_loss(output, seed=SEED)
    flat = [(name, i, a) for name, got in seen.items() for i, a in enumerate(got.get("outputs", ()))]
    reached = [(name, i, a) for name, i, a in flat if a.requires_grad]
    grads = torch.autograd.grad(loss, [a for _, _, a in reached], allow_unused=True) if reached else ()
    by = {(name, i): g for (name, i, _), g in zip(reached, grads, strict=True)}
    for name, got in seen.items():
        got["cotangents"] = [
            by[(name, i)].detach().cpu().numpy().copy()
            if by.get((name, i)) is not None
            else np.zeros(tuple(a.shape), dtype=str(a.dtype).removeprefix("torch."))
            for i, a in enumerate(got.get("outputs", ()))
        ]


def _save(directory: str, where: tuple[int, str], got: dict[str, Any], module: Any, cotangent: str) -> str:
    """Block ``where`` (its index and name)'s file in ``directory``; its path. With ``module`` (the
    model's block, when its weights are saved), its output and its gradient at the recorded point too."""
    index, name = where
    arrays = {f"input/{k}": v for k, v in got["inputs"].items()}
    cotangents = got.get("cotangents") or [
        np.zeros(tuple(a.shape), dtype=str(a.dtype).removeprefix("torch.")) for a in got["outputs"]
    ]
    arrays.update({f"cotangent/{i}": c for i, c in enumerate(cotangents)})
    meta = {
        "block": name,
        "index": index,
        "constants": got["constants"],
        "tuples": got.get("tuples", {}),
        "calls": got["calls"],
        "threads": torch.get_num_threads(),
        "cotangent": cotangent,
    }
    if module is not None:
        arrays.update({f"weight/{k}": v.detach().cpu().numpy() for k, v in module.state_dict().items()})
        arrays.update({f"output/{i}": a for i, a in enumerate(got["values"])})
        at = Recorded(
            name,
            index,
            got["inputs"],
            got["constants"],
            cotangents,
            {},
            got["calls"],
            tuples=got.get("tuples", {}),
            threads=meta["threads"],
            cotangent=cotangent,
        )
        try:
            arrays.update({f"backward/{k}": g for k, g in backward(at, module).items()})
        except BaseException as exc:  # the model's code: said when a rebuilt block is to be proven by it
            reraise_user_interrupt(exc)
            why = f"its gradient at the recorded point could not be recorded: {describe(exc)}"
            meta["backward_problem"] = why
    path = os.path.join(directory, f"block-{index:05d}.npz")
    np.savez(path, meta=np.array(json.dumps(meta)), **arrays)
    return path


def load(path: str) -> Recorded:
    """A block's recording from its file (read without pickle)."""
    with np.load(path, allow_pickle=False) as data:
        meta = json.loads(str(data["meta"]))
        kinds = ("input", "cotangent", "weight", "output", "backward")
        part: dict[str, dict[str, np.ndarray]] = {kind: {} for kind in kinds}
        for key in data.files:
            if key != "meta":
                kind, _, name = key.partition("/")
                part[kind][name] = data[key]
    cotangents = [part["cotangent"][str(i)] for i in range(len(part["cotangent"]))]
    return Recorded(
        meta["block"],
        meta["index"],
        part["input"],
        meta["constants"],
        cotangents,
        part["weight"],
        meta["calls"],
        meta.get("tuples", {}),
        [part["output"][str(i)] for i in range(len(part["output"]))],
        meta.get("threads"),
        meta.get("cotangent", "model"),
        part["backward"],
        meta.get("backward_problem"),
    )


def block_module(blocks: Blocks, recorded: Recorded, model: TorchModule = None) -> TorchModule:
    """Block ``recorded.block`` built alone by ``blocks.torch_block`` with its recorded weights, or, without
    ``torch_block``, taken from the whole model (``model``, or built here).

    Raises:
        ValueError: ``torch_block`` failed, returned no module, or its weights do not fit the recording.
    """
    where = f"blocks `{blocks.name}`"
    if model is not None or blocks.torch_block is None:
        return (model if model is not None else blocks.model()).get_submodule(recorded.block)
    what = f"`torch_block({recorded.index}, {recorded.block!r})`"
    module = user_call(where, what, blocks.torch_block, recorded.index, recorded.block)
    if not hasattr(module, "load_state_dict"):
        raise ValueError(f"{where}: {what} must return a torch.nn.Module, found {type(module).__name__}.")
    state = {k: torch.as_tensor(v) for k, v in recorded.weights.items()}
    try:
        module.load_state_dict(state, strict=True)
    except RuntimeError as exc:
        raise ValueError(f"{where}: the recorded weights do not fit {what}: {describe(exc)}") from exc
    module.eval()
    prove_rebuilt(f"{where}: {what}", recorded, module)
    return module
