"""PyTorch adapter for a workload's ``"torch"`` implementation: ``backward()`` on the loss, and the loss
itself under ``torch.no_grad()`` for the oracle."""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from crosscheck._backends.devices import placed_device
from crosscheck._backends.handed import same_bits
from crosscheck._compare.device import Arithmetic

from . import buffer, environment
from .arrays import numpy, share, tensor

__all__ = ["TorchWorkloadBackend"]


class Resident:
    """The tensors of the last ``loss`` call, reused where a call passes the same bits again.

    The oracle evaluates the loss many times at points that differ in one tensor: copying every
    parameter array on each call cost as much as the forward pass. A held tensor is over the
    memory of an array handed (``share``: the engine's private copy, compared bit for bit after the
    call, so a model that writes into it fails the call; copied only where torch cannot wrap it); one
    whose bits equal the array passed now (compared each call, never assumed) is passed again, any
    other array is taken. ``taken`` counts the arrays taken. Sharing, not copying, saved 1.4 GB of
    fresh memory on GPT-2 small's default reference.
    """

    def __init__(self) -> None:
        self._held: dict[str, torch.Tensor] = {}
        self.taken = 0

    def __call__(self, arrays: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
        held: dict[str, torch.Tensor] = {}
        for k, v in arrays.items():
            value = np.asarray(v)
            old = self._held.get(k)
            if old is not None and value.dtype.name != "bfloat16" and tuple(old.shape) == value.shape:
                seen = old.numpy()  # the tensor's own memory, no copy
                if same_bits(seen, value):
                    held[k] = old
                    continue
            held[k] = share(value)
            self.taken += 1
        self._held = held  # this call's only: never more than one model's
        return held

    def clear(self) -> None:
        self._held = {}

    @property
    def held(self) -> int:
        """The number of tensors held (0 after ``clear``)."""
        return len(self._held)


@dataclasses.dataclass
class _Line:
    """What ``hold_point`` keeps: the point's tensors, the buffer the points are formed in, the inputs
    (NumPy), and each held direction's signs by name (``hold_direction``)."""

    point: dict[str, torch.Tensor]
    buffer: dict[str, torch.Tensor]
    inputs: dict[str, np.ndarray]
    signs: dict[str, dict[str, torch.Tensor]] = dataclasses.field(default_factory=dict)
    #: Each direction's tensors whose signs are -1, 0 or 1 (``buffer.exact``): their write check.
    exact: dict[str, dict[str, torch.Tensor]] = dataclasses.field(default_factory=dict)


def _placed(loss):
    """``loss`` computing on the device the run placed the PyTorch side on (``--torch-device``): its
    tensors, made on the host over the arrays handed, moved there for each call (autograd's ``to``: a
    gradient comes back to the leaf handed); as it is where none was placed."""

    def on_device(params: dict, inputs: dict):
        device = placed_device("torch")
        if device is None or device == "cpu":
            return loss(params, inputs)
        return loss(
            {k: v.to(device) for k, v in params.items()}, {k: v.to(device) for k, v in inputs.items()}
        )

    return on_device


class TorchWorkloadBackend:
    """The gradient of ``loss(params, inputs)`` (a 0-d tensor) with ``backward()``.

    Every parameter is a new leaf tensor over the memory of the array handed (``share``: the engine
    hands a backend private copies and compares each bit for bit after the call with what it was copied
    from, so the model is not copied once more, and a loss that writes into a parameter fails the call);
    the inputs are copied; a parameter the loss does not use gets a zero gradient.
    """

    def __init__(self, name: str, loss) -> None:
        self.name = name
        self._loss = _placed(loss)
        #: Where a port's module computes (``Homed.home``), else None: the host unless placed.
        self._home = getattr(loss, "home", None)
        #: The oracle's evaluations (``loss``): arrays taken once, while their bits stay.
        self.resident = Resident()
        #: The point the oracle's evaluations along a line start from (``hold_point``).
        self._line: _Line | None = None

    def grad(self, params: dict[str, np.ndarray], inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        self.release_evaluations()  # the evaluations are over: their copies are not kept
        leaves = {k: share(v, requires_grad=True) for k, v in params.items()}
        loss = self._loss(leaves, {k: tensor(v) for k, v in inputs.items()})
        loss.backward()
        return {
            k: numpy(t.grad) if t.grad is not None else np.zeros_like(params[k]) for k, t in leaves.items()
        }

    def loss(self, params: dict[str, np.ndarray], inputs: dict[str, np.ndarray]) -> np.ndarray:
        """The loss under ``torch.no_grad()`` (no graph is built), as a 0-d NumPy array of its dtype.

        The arrays become tensors of their own dtype over their memory (``share``): float64 arrays give a
        float64 computation unless the implementation casts; an array whose bits the last call took
        already is not taken again (``Resident``).
        """
        with torch.no_grad():
            held = self.resident(
                {**{f"p:{k}": v for k, v in params.items()}, **{f"i:{k}": v for k, v in inputs.items()}}
            )
            out = self._loss(
                {k[2:]: t for k, t in held.items() if k.startswith("p:")},
                {k[2:]: t for k, t in held.items() if k.startswith("i:")},
            )
            if not isinstance(out, torch.Tensor):
                return np.asarray(out)
            return numpy(out.detach().cpu()).copy()

    def losses(
        self, params: dict[str, np.ndarray], inputs: dict[str, np.ndarray], batched: tuple[str, ...]
    ) -> np.ndarray:
        """The loss at ``k`` points in one call (the oracle's batched evaluations): the tensors named in
        ``batched`` carry a leading axis of ``k``; ``torch.func.vmap`` over them, under
        ``torch.no_grad()``. A model ``vmap`` cannot run raises (the oracle then evaluates one point a
        call). The parameters are the engine's private copies, shared (``share``), not copied again."""
        dims = {k: 0 if k in batched else None for k in params}
        with torch.no_grad():
            out = torch.func.vmap(self._loss, in_dims=(dims, None))(
                {k: share(v) for k, v in params.items()},
                {k: torch.tensor(v) for k, v in inputs.items()},
            )
        return out.detach().cpu().numpy().copy()

    def hold_point(self, params: dict[str, np.ndarray], inputs: dict[str, np.ndarray]) -> None:
        """Keep the point for ``loss_along`` (the oracle's evaluations along a line, ``oracle.line``): the
        parameters as tensors over the arrays handed (the engine's private copies: ``share``), a buffer
        of their size the points are formed in, and the inputs (a tensor of them made each evaluation)."""
        self.release_evaluations()
        point = {k: share(v) for k, v in params.items()}
        self._line = _Line(point, {k: torch.empty_like(t) for k, t in point.items()}, dict(inputs))

    def hold_direction(self, name: str, signs: dict[str, np.ndarray]) -> None:
        """Keep a line's signs (``{tensor: +-1}``, int8, the arrays handed) as ``name`` for ``loss_along``."""
        line = self._held_line()
        line.signs[name] = {k: share(v) for k, v in signs.items()}
        line.exact[name] = {k: t for k, t in line.signs[name].items() if buffer.exact(t.numpy())}

    def loss_along(self, name: str, coefficients: dict[str, float]) -> np.ndarray:
        """The loss at ``point_k + c_k * signs_k`` (``coefficients``: ``{tensor: c_k}``, the signs held as
        ``name``; the others at the point) under ``torch.no_grad()``, as ``loss``'s. Every tensor the
        model sees is the buffer, written whole before each evaluation (the signs, then
        ``torch.add(point, signs, alpha=c)`` into it: ``c * signs`` exact, the sum rounded once), never the
        point itself: a model that writes into a parameter writes into the buffer, which the next
        evaluation writes over. A port's forward finds the write through the buffer's test
        (``buffer.checked``: recomputed and compared after the forward), not a copy of it."""
        line = self._held_line()
        signs = line.signs[name] if coefficients else {}
        with torch.no_grad():
            for k, base in line.point.items():
                into = line.buffer[k]
                if k in coefficients:  # the signs as float64 first: an int8 ``other`` takes a slow path
                    buffer.form(into, base, signs[k], float(coefficients[k]))
                else:
                    into.copy_(base)
            with buffer.checked(line.buffer, line.point, line.exact.get(name, {}), coefficients):
                out = self._loss(dict(line.buffer), {k: tensor(v) for k, v in line.inputs.items()})
            if not isinstance(out, torch.Tensor):
                return np.asarray(out)
            return numpy(out.detach().cpu()).copy()

    def _held_line(self) -> _Line:
        if self._line is None:
            raise RuntimeError("no point held: `hold_point(params, inputs)` first")
        return self._line

    def release_evaluations(self) -> None:
        """Drop the tensors the last ``loss`` calls hold (``Resident``), and the held point, its buffer and
        signs (``hold_point``): the oracle calls it when it is done with this side's differences (issue
        38)."""
        self.resident.clear()
        self._line = None

    def arithmetic(self) -> Arithmetic:
        """Where its calls compute (read inside the run's placement): its device and TF32 switches."""
        return environment.arithmetic(home=self._where())

    def _where(self) -> str | None:
        return self._home() if callable(self._home) else None

    def info(self) -> dict[str, str]:
        return {
            "framework": "torch",
            "version": torch.__version__,
            **environment.side(home=self._where()),
        }
