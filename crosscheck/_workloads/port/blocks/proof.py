"""A block rebuilt by ``torch_block`` is the model's block before its check counts (``prove_rebuilt``):
its weights, its output on the recorded inputs and its gradient there (``backward``), each bit for bit
with the model's block's as recorded.

The backward is the check's own: the block's check differentiates its loss (``declare.block_loss``:
the recorded cotangent, or the port's default projection) with respect to the block's parameters, and
a rebuilt block whose forward is the model's but whose backward is not (a straight-through estimator,
a custom ``autograd.Function``) would be the reference the port is judged against. So the recording
takes the model's block's gradient of that loss at the recorded point, with respect to its parameters
and its floating-point inputs, and the rebuilt block must give it again, bit for bit, with as many
PyTorch threads (a sum split otherwise may round otherwise).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from crosscheck._errors import user_call
from crosscheck._workloads.losses import floating_outputs
from crosscheck._workloads.port.blocks.declare import block_call, block_loss
from crosscheck._workloads.port.blocks.recorded import Recorded


def prove_rebuilt(what: str, recorded: Recorded, module: Any) -> None:
    """A rebuilt block (``what``) is the model's block before its verdict counts: its weights are the
    recorded ones bit for bit, and on the recorded inputs it gives the model's block's recorded output
    and gradient (``backward``) bit for bit. A block rebuilt otherwise (a forgotten layer index,
    another config, another backward) would be checked in the model's place, and its verdict is not
    the model's.

    Raises:
        ValueError: it differs, or the recording holds no output or gradient to prove it by (one line).
    """
    state = module.state_dict()
    for name, want in recorded.weights.items():
        got = numpy_of(state[name])
        if got.dtype != want.dtype or got.shape != want.shape or got.tobytes() != want.tobytes():
            raise ValueError(
                f"{what} is not the model's block: its `{name}` ({got.dtype}, {got.shape}) is not the "
                f"recorded weight ({want.dtype}, {want.shape}) bit for bit once loaded."
            )
    if not recorded.outputs:
        raise ValueError(f"{what} cannot be proven the model's block: its recording holds no output.")
    _prove_forward(what, recorded, module)
    if recorded.backward_problem is not None or not recorded.backward:
        why = recorded.backward_problem or "its recording holds no gradient"
        raise ValueError(f"{what} cannot be proven the model's block: {why}.")
    got_all = user_call(what, "its backward pass on the recorded inputs", backward, recorded, module)
    for key, want in recorded.backward.items():
        found = got_all.get(key)
        if found is None or found.dtype != want.dtype or found.shape != want.shape:
            raise ValueError(
                f"{what} is not the model's block: its gradient with respect to {_named(key)} is "
                f"{_kind(found)}, the model's block's {_kind(want)}."
            )
        if found.tobytes() != want.tobytes():
            raise ValueError(
                f"{what} is not the model's block: on the recorded inputs its gradient with respect to "
                f"{_named(key)} differs from the model's block's ({_gap(found, want)}): its backward is "
                "another (a custom autograd Function? a straight-through estimator?), and its check "
                "would judge the port against it."
            )
    extra = sorted(set(got_all) - set(recorded.backward))
    if extra:
        raise ValueError(
            f"{what} is not the model's block: it has a gradient with respect to {_named(extra[0])}, "
            "which the model's block has not."
        )


def _prove_forward(what: str, recorded: Recorded, module: Any) -> None:
    call = block_call(recorded)
    inputs = {k: torch.as_tensor(v) for k, v in recorded.inputs.items()}
    with torch.no_grad(), threads(recorded.threads):
        output = user_call(what, "its forward pass on the recorded inputs", call, module, inputs)
    got_all = [numpy_of(a) for a in floating_outputs(output)]
    shapes = [(a.dtype, a.shape) for a in got_all]
    wanted = [(a.dtype, a.shape) for a in recorded.outputs]
    if shapes != wanted:
        raise ValueError(
            f"{what} is not the model's block: on the recorded inputs its output's floating-point arrays "
            f"are {_kinds(shapes)}, the model's block's {_kinds(wanted)}."
        )
    for i, (got, want) in enumerate(zip(got_all, recorded.outputs, strict=True)):
        if got.tobytes() != want.tobytes():
            raise ValueError(
                f"{what} is not the model's block: on the recorded inputs its output {i} differs from the "
                f"model's block's ({_gap(got, want)}), so its check would not be the model's block's: "
                "build it as the model builds it (a layer index? a config?)."
            )


def backward(recorded: Recorded, module: Any) -> dict[str, np.ndarray]:
    """The gradient of the block's check loss (``declare.block_loss``) at the recorded inputs, with
    respect to each parameter that requires grad (``weight/NAME``) and each floating-point input
    (``input/NAME``), zeros where the loss does not reach; on the device of the block's parameters,
    with the recording's PyTorch threads."""
    device = next((p.device for p in module.parameters()), torch.device("cpu"))
    inputs = {k: torch.tensor(v, device=device) for k, v in recorded.inputs.items()}
    floating = {k: t.requires_grad_(True) for k, t in inputs.items() if t.is_floating_point()}
    params = {k: p for k, p in module.named_parameters() if p.requires_grad}
    wrt = {**{f"weight/{k}": p for k, p in params.items()}, **{f"input/{k}": t for k, t in floating.items()}}
    loss_of = block_loss(recorded.cotangent, recorded.cotangents)
    with torch.enable_grad(), threads(recorded.threads):
        loss = loss_of(block_call(recorded)(module, inputs))
        reached = loss.requires_grad and bool(wrt)
        grads = torch.autograd.grad(loss, list(wrt.values()), allow_unused=True) if reached else ()
    found = dict(zip(wrt, grads, strict=True)) if reached else {}
    return {
        key: numpy_of(found[key]) if found.get(key) is not None else np.zeros_like(numpy_of(t))
        for key, t in wrt.items()
    }


def _named(key: str) -> str:
    kind, _, name = key.partition("/")
    return f"its {'parameter' if kind == 'weight' else 'input'} `{name}`"


def _kind(array: np.ndarray | None) -> str:
    return "none" if array is None else f"{array.dtype}{list(array.shape)}"


def _gap(got: np.ndarray, want: np.ndarray) -> str:
    gap = np.abs(got.astype(np.float64) - want.astype(np.float64))
    largest = np.nanmax(np.abs(want), initial=0.0)
    return f"by up to {np.nanmax(gap, initial=0.0):.3g}, the largest entry {largest:.3g}"


def _kinds(arrays: list[tuple[Any, tuple[int, ...]]]) -> str:
    return ", ".join(f"{dtype}{list(shape)}" for dtype, shape in arrays) or "none"


@contextlib.contextmanager
def threads(count: int | None) -> Iterator[None]:
    """PyTorch's intra-op threads set to ``count`` (None: left as they are), restored afterwards."""
    before = torch.get_num_threads()
    if count is not None and count != before:
        torch.set_num_threads(count)
    try:
        yield
    finally:
        if torch.get_num_threads() != before:
            torch.set_num_threads(before)


def numpy_of(tensor: Any) -> np.ndarray:
    """A tensor's values as a NumPy array of their own (on the host)."""
    return tensor.detach().cpu().numpy().copy()
