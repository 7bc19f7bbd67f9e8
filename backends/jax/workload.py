"""JAX adapter for a workload's ``"jax"`` implementation: ``jax.grad`` over the parameters dict, and the
loss itself (no autodiff) for the oracle."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from crosscheck._backends.handed import let_go, same_bits
from crosscheck._compare.device import Arithmetic
from crosscheck._compare.dtypes import aligned_copy
from crosscheck._workloads.programs import Kept

from . import environment, form, program, rounded

__all__ = ["JaxWorkloadBackend"]


def _wide(*groups: dict[str, np.ndarray]) -> bool:
    return any(v.dtype == np.float64 for group in groups for v in group.values())


def _sent(value: Any) -> jax.Array:
    """A device copy of ``value``, complete when returned (the caller may write into ``value`` next).

    ``jax.device_put(may_alias=False)`` copies in about half the time ``jnp.array`` takes on the CPU,
    to the same dtype under the same x64 flag; but despite its documentation it sometimes
    returns an array that shares ``value``'s memory (seen for small arrays, JAX 0.10): then
    ``jnp.array``'s copy is taken, which never does."""
    value = np.asarray(value)
    out = jax.device_put(value, may_alias=False).block_until_ready()
    if np.may_share_memory(np.asarray(out), value):
        out = jnp.array(value, copy=True)
    return out


def _lent(arrays: dict[str, np.ndarray]) -> dict[str, jax.Array]:
    """Device arrays of ``arrays`` for one ``grad`` call, each read in place where XLA's CPU client can
    (a 64-byte aligned array, as the engine hands them: ``dtypes.aligned_copy``), else copied: no device
    copy of the model beside the NumPy one (in the float64 re-run, 8 bytes a parameter). Safe
    for arrays nobody writes into while the device arrays live, and XLA does not write to arguments it
    was not donated: ``grad``'s, dropped when it returns, after its results are read (``np.asarray``
    waits for them; whatever ``grad`` returns is copied by the engine, ``to_array``, so a result that
    is an argument forwarded by ``jax.jit`` is never the caller's array), and the line's point and
    signs (``hold_point``: the engine's private copies, held until ``release_evaluations``). XLA gives
    its reference to a lent array back only at its garbage collection: ``grad`` and
    ``release_evaluations`` run it (``let_go``) once the device arrays are dropped. The oracle's
    ``loss`` evaluations keep their device arrays across calls while a caller may write into the
    NumPy ones: they copy (``_sent``)."""
    return {k: jax.device_put(np.asarray(v), may_alias=True) for k, v in arrays.items()}


#: Entries compared at a time (``same_bits``): an array the oracle moved costs one block, not a pass.
CHUNK = 1 << 20


class Resident:
    """The device arrays of the last call's arrays, reused where a call passes the same bits again.

    The oracle evaluates the loss many times at points that differ in one tensor (a direction, an entry):
    copying every parameter array to the device on each call cost more than the forward pass itself.
    An array whose bits equal those of the device array made from it last time (compared,
    never assumed: the caller may have written into it; on the CPU the device array is read in place,
    no copy) is not sent again. ``sent`` counts the arrays sent to the device.
    """

    def __init__(self) -> None:
        self._held: dict[str, jax.Array] = {}
        self._wide: bool | None = None
        self.sent = 0

    def __call__(self, arrays: dict[str, np.ndarray], wide: bool) -> dict[str, jax.Array]:
        """The device arrays of ``arrays``, made under x64 ``wide`` (a call under the other flag sends
        every array: an integer array is converted differently there)."""
        if wide != self._wide:
            self._held, self._wide = {}, wide
        held: dict[str, jax.Array] = {}
        for k, v in arrays.items():
            value = np.asarray(v)
            old = self._held.get(k)
            seen = np.asarray(old) if old is not None else None
            if seen is not None and seen.shape == value.shape and seen.dtype == value.dtype:
                if same_bits(seen, value, block=CHUNK):
                    held[k] = old
                    continue
            held[k] = _sent(value)
            self.sent += 1
        self._held = held  # the arrays of this call only: never more than one model's
        return held

    def clear(self) -> None:
        self._held, self._wide = {}, None

    @property
    def held(self) -> int:
        """The number of device arrays held (0 after ``clear``)."""
        return len(self._held)


def _keyed(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {f"i:{k}": v for k, v in inputs.items()}


def _unkeyed(arrays: dict[str, Any], prefix: str) -> dict[str, Any]:
    return {k[len(prefix) :]: v for k, v in arrays.items() if k.startswith(prefix)}


def _moved(loss: Any, names: tuple[str, ...]) -> Any:
    """``loss`` at the point moved along the signs of the tensors ``names`` by their coefficients."""

    def moved(coefficients: dict, params: dict, signs: dict, inputs: dict) -> Any:
        at = {
            k: v + coefficients[k] * signs[k].astype(v.dtype) if k in names else v for k, v in params.items()
        }
        return loss(at, inputs)

    return moved


class JaxWorkloadBackend:
    """The gradient of ``loss(params, inputs)`` with ``jax.jit(jax.grad(loss))``; the loss with
    ``jax.jit(loss)`` (compiled, never differentiated: what the oracle differences).

    float64 arrays are computed in float64: x64 is enabled for the call only (``jax.enable_x64``), so
    the flag never leaks into other code. The compiled functions are kept from one check to the next
    (``Kept``): each check traces them afresh (``renew``), and runs a program compiled in an earlier
    check only where it is the same program.
    """

    def __init__(self, name: str, loss) -> None:
        self.name = name
        self._raw = loss
        self._grad = Kept()
        self._loss = Kept()
        self._many: dict[tuple, Kept] = {}
        #: The oracle's evaluations (``loss``, ``losses``): arrays sent once, while their bits stay.
        self.resident = Resident()
        #: The oracle's evaluations along a line (``hold_point``, ``hold_direction``, ``loss_along``).
        self._point: tuple[dict[str, jax.Array], dict[str, jax.Array], bool] | None = None
        self._signs: dict[str, dict[str, jax.Array]] = {}
        self._along: dict[tuple[str, ...], Kept] = {}
        #: The float64 tensors moved along a line, formed on the host (``_formed``), kept across calls.
        self._buffers: dict[str, np.ndarray] = {}

    def grad(self, params: dict[str, np.ndarray], inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        self.release_evaluations()  # the evaluations are over: their device copies are not kept
        with jax.enable_x64(_wide(params, inputs)):
            grads = self._grad(jax.grad(self._raw), _lent(params), _lent(inputs))
            out = {k: np.asarray(v) for k, v in grads.items()}
        del grads
        let_go()  # the lent arrays are given back now, not at some later collection
        return out

    def loss(self, params: dict[str, np.ndarray], inputs: dict[str, np.ndarray]) -> np.ndarray:
        """The loss as a 0-d NumPy array of the dtype it was computed in (float64 arrays: x64 on); the
        arrays whose bits the last call sent already are not sent again (``Resident``)."""
        wide = _wide(params, inputs)
        with jax.enable_x64(wide):
            arrays = self.resident({**{f"p:{k}": v for k, v in params.items()}, **_keyed(inputs)}, wide)
            return np.asarray(self._loss(self._raw, _unkeyed(arrays, "p:"), _unkeyed(arrays, "i:")))

    def losses(
        self, params: dict[str, np.ndarray], inputs: dict[str, np.ndarray], batched: tuple[str, ...]
    ) -> np.ndarray:
        """The loss at ``k`` points in one call (the oracle's batched evaluations): the tensors named in
        ``batched`` carry a leading axis of ``k``. One jitted function, ``jax.vmap`` over the points,
        compiled once per set of tensors; ``k`` is padded to a power of two (a copy of the first point),
        so that a run compiles it for few sizes."""
        key = (tuple(params), tuple(batched))
        axes = {k: 0 if k in batched else None for k in params}
        many = self._many.setdefault(key, Kept())
        count = len(params[batched[0]])
        size = 1 << (count - 1).bit_length()
        padded = {
            k: np.concatenate([v, np.repeat(v[:1], size - count, axis=0)]) if k in batched else v
            for k, v in params.items()
        }
        shared = {f"p:{k}": v for k, v in padded.items() if k not in batched}
        wide = _wide(params, inputs)
        with jax.enable_x64(wide):
            arrays = self.resident({**shared, **_keyed(inputs)}, wide)
            moving = {k: _sent(v) for k, v in padded.items() if k in batched}
            device = {k: moving[k] if k in moving else arrays[f"p:{k}"] for k in padded}
            batch = jax.vmap(self._raw, in_axes=(axes, None))
            return np.asarray(many(batch, device, _unkeyed(arrays, "i:")))[:count]

    def hold_point(self, params: dict[str, np.ndarray], inputs: dict[str, np.ndarray]) -> None:
        """Keep the point on the device for ``loss_along`` (the oracle's evaluations along a line,
        ``oracle.line``), under x64 where it is float64: the arrays handed, read in place (``_lent``).
        They are the engine's private copies, which nobody writes into or reuses once the call returns
        (``oracle.line``); a device copy of each cost 1 GB of fresh memory on GPT-2 small."""
        self.release_evaluations()
        wide = _wide(params, inputs)
        with jax.enable_x64(wide):
            self._point = (_lent(params), _lent(inputs), wide)

    def hold_direction(self, name: str, signs: dict[str, np.ndarray]) -> None:
        """Keep a line's signs (``{tensor: +-1}``, int8) on the device as ``name`` for ``loss_along``,
        read in place as the point is (``hold_point``)."""
        self._held_point()
        self._signs[name] = _lent(signs)

    def loss_along(self, name: str, coefficients: dict[str, float]) -> np.ndarray:
        """The loss at ``point_k + c_k * signs_k`` (``coefficients``: ``{tensor: c_k}``, the signs held as
        ``name``; the others at the point), as ``loss``'s: one jitted function of the coefficients, the
        point and the signs (the sum inside it: ``c * signs`` exact, the sum rounded once), compiled once
        per set of tensors moved; nothing is sent but the coefficients."""
        params, inputs, wide = self._held_point()
        with jax.enable_x64(wide):
            if not coefficients:
                return np.asarray(self._loss(self._raw, params, inputs))
            formed = self._formed(name, coefficients)
            if formed is not None:  # the forward pass alone, the moved tensors read in place
                out = np.asarray(self._loss(self._raw, {**params, **formed}, inputs))
                del formed
                let_go()
                return out
            key = tuple(coefficients)
            along = self._along.setdefault(key, Kept())
            moved = {k: np.float64(c) for k, c in coefficients.items()}
            signs = self._signs[name]
            return np.asarray(
                along(_moved(self._raw, key), moved, params, {k: signs[k] for k in key}, inputs)
            )

    def _formed(self, name: str, coefficients: dict[str, float]) -> dict[str, jax.Array] | None:
        """The moved tensors ``point_k + c_k * signs_k``, each formed by NumPy in a buffer kept across
        calls, on every core (``form``), and lent to XLA in place (``_lent``); None unless every moved
        tensor is float64 with int8 signs of its shape (then ``loss_along`` forms them inside its jitted
        function).

        The same bits as that function's ``v + c * signs``: ``c * signs`` is exact for signs of -1, 0
        and 1 and the sum rounded once, as the oracle's own evaluator and the PyTorch adapter form
        them. Formed inside XLA, the tensors that feed a matrix product (a model's layers: 85M float64
        entries on GPT-2 small) were new memory each call, its pages faulted in afresh: 0.36 s and
        0.63 GiB of page faults a call, against 0.043 s for the forward pass. A buffer is
        written only between calls, after the last call's result was read."""
        params, _, _ = self._held_point()
        signs = self._signs[name]
        moved: list[tuple[str, np.ndarray, np.ndarray, float]] = []
        for k, c in coefficients.items():
            at, s = np.asarray(params[k]), np.asarray(signs[k])
            if at.dtype != np.float64 or s.dtype != np.int8 or s.shape != at.shape:
                return None
            moved.append((k, at, s, c))
        pieces: list[form.Piece] = []
        for k, at, s, c in moved:
            at, s = np.asarray(at, order="C"), np.asarray(s, order="C")  # flat views: entries in one order
            buffer = self._buffers.get(k)
            if buffer is None or buffer.shape != at.shape:
                buffer = self._buffers[k] = aligned_copy(at)  # C order, as ``at`` now is
            pieces.append((at, s, buffer, np.float64(c)))
        form.form(pieces)  # on every core (``form``)
        return {k: jax.device_put(self._buffers[k], may_alias=True) for k, *_ in moved}

    def _held_point(self) -> tuple[dict[str, jax.Array], dict[str, jax.Array], bool]:
        if self._point is None:
            raise RuntimeError("no point held: `hold_point(params, inputs)` first")
        return self._point

    def release_evaluations(self) -> None:
        """Drop the device arrays the last ``loss``/``losses`` calls hold (``Resident``) and the held point
        and signs (``hold_point``): the oracle calls it when it is done with this side's differences, so
        that this side's float64 copy of the model is not held while the other side's loss is
        differenced."""
        self.resident.clear()
        self._point, self._signs, self._buffers = None, {}, {}
        let_go()  # XLA gives the point and signs it read in place back now

    def renew(self) -> None:
        """A new check: each compiled function is traced afresh at its next call (``Kept.renew``), so that
        what the loss's code reads when traced (a flag, a closure's variable) is read as it is now."""
        for kept in (self._grad, self._loss, *self._many.values(), *self._along.values()):
            kept.renew()

    def arithmetic(self) -> Arithmetic:
        """Where this side computes now (the judge permits an accelerator's arithmetic its rounding)."""
        return environment.arithmetic()

    def modelled(
        self, params: dict[str, np.ndarray], inputs: dict[str, np.ndarray], unit: float | None
    ) -> dict[str, np.ndarray]:
        """The gradient as ``grad`` makes it, each product JAX's default precision makes taking its float32
        inputs rounded to ``unit`` (a device's: ``rounded.bits``; None: unrounded), where the side runs
        now: the device model of its reduced-precision products, made on the host
        (``crosscheck._compare.modelled``)."""
        with jax.enable_x64(_wide(params, inputs)):
            if unit is None:
                grads = self._grad(jax.grad(self._raw), _lent(params), _lent(inputs))
            else:
                grads = rounded.rounded(jax.grad(self._raw), rounded.mantissa(unit))(
                    _lent(params), _lent(inputs)
                )
            out = {k: np.asarray(v) for k, v in grads.items()}
        del grads
        let_go()
        return out

    def program(self, params: dict[str, dict], inputs: dict[str, dict]) -> dict[str, Any]:
        """The program ``grad`` runs for arrays of these shapes and dtypes (``crosscheck._backends.
        program.specs``), traced where the side runs now (``program.traced``), not compiled."""
        with jax.enable_x64(program.wide(params, inputs)):
            return program.traced(jax.grad(self._raw), program.abstract(params), program.abstract(inputs))

    def info(self) -> dict[str, str]:
        return {
            "framework": "jax",
            "version": jax.__version__,
            **environment.side(),
        }
