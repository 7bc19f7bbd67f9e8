"""Hostile backends for the contract tests (``tests/engine/test_call.py``): each misbehaves in one way.

A hostile backend computes the right answer by hand (NumPy, float64, rounded to its inputs' dtype) and
then does one thing a backend must not do, or may do only because crosscheck guards the call. ``KINDS``
lists the ways. Every kind exists in each shape of the backend protocol, under the import string
``hostile:<shape>_<kind>``:

- ``stack_<kind>``: ``grad(weights, x)`` misbehaves (the stack's gradient);
- ``hvp_<kind>``: a right ``grad``, and ``hvp(weights, x, v)`` misbehaves (the stack's HVP);
- ``tiny_<kind>``: ``grad(params, inputs) -> {"w", "b"}`` for ``TINY``, a workload defined here;
- ``ste_<kind>``: ``grad(params, inputs) -> {"weights"}`` for the built-in ``ste-stack``.

Each is a class, so every load makes a fresh object (the accumulating kind keeps state per object). In
Python, ``make(shape, kind)`` returns one. ``ARMED`` false makes every backend here compute the right
answer and behave, all but "wrong" (``crosscheck replay`` tests save a bundle disarmed, then replay it
armed).
"""

from __future__ import annotations

import math
import os
import sys
import time
from typing import Any, ClassVar

import numpy as np

import crosscheck

#: The ways to misbehave. Those after "accumulates" are helpers: "witness" fails when the inputs it is
#: given carry a hostile write (a 5.0 or a -0.0), "wrong" returns twice the gradient (a run that fails),
#: "slow" sleeps 60 s in the call after touching the file named by $HOSTILE_MARKER; "os_exit" and
#: "segfault" end their process (tests/engine/process/test_isolate.py runs them in worker processes).
KINDS = (
    "none",  # returns None
    "raises",  # raises ValueError("boom")
    "exit",  # sys.exit(0) inside the call
    "kbint",  # raises KeyboardInterrupt inside the call (not a real Ctrl-C)
    "requires_grad",  # a torch tensor with requires_grad=True holding the right values
    "not_array",  # an object whose __array__ raises
    "float16",  # declares output_dtype "float16" and returns float16
    "markup",  # the right answer, under the name MARKUP_NAME
    "writes",  # writes 5 into its first input array
    "negzero",  # writes -0.0 over the first exact 0.0 of its inputs
    "seterr",  # np.seterr(all="raise"), right answer
    "torch_precision",  # torch.set_float32_matmul_precision("medium"), right answer
    "jax_precision",  # jax.config.update("jax_default_matmul_precision", "bfloat16"), right answer
    "noisy",  # the right answer x (1 + 0.01 randn), new noise on every call: nondeterministic
    "accumulates",  # a stateful torch port that never zeroes .grad: the n-th call returns n x the answer
    "witness",
    "wrong",
    "slow",
    "os_exit",  # os._exit(3) inside the call: only a worker process (--isolate) survives it
    "segfault",  # reads address 0 (SIGSEGV) inside the call: likewise
)
MARKUP_NAME = "[/]evil[bold]"
ARMED = True


# -- right answers, by hand -----------------------------------------------------------------------------


def stack_grad(weights: np.ndarray, x: np.ndarray) -> np.ndarray:
    """d sum(y_L ** 2) / d weights of the ReLU stack, in float64 (derivative 0 at a zero pre-activation)."""
    ws, ys = np.asarray(weights, np.float64), [np.asarray(x, np.float64)]
    for w in ws:
        ys.append(np.maximum(ys[-1] @ w, 0.0))
    g, out = 2 * ys[-1], np.empty_like(ws)
    for k in reversed(range(len(ws))):
        g = g * (ys[k + 1] > 0)
        out[k] = ys[k].T @ g
        g = g @ ws[k].T
    return out


def stack_hvp(weights: np.ndarray, x: np.ndarray, v: np.ndarray) -> np.ndarray:
    """The Hessian-vector product of the stack's loss along ``v``, in float64: the gradient's
    derivative along ``v`` with the ReLU masks held fixed (forward tangents, then both backward sweeps)."""
    ws, vs = np.asarray(weights, np.float64), np.asarray(v, np.float64)
    ys, dys, masks = [np.asarray(x, np.float64)], [np.zeros(np.shape(x))], []
    for w, dw in zip(ws, vs, strict=True):
        z, dz = ys[-1] @ w, dys[-1] @ w + ys[-1] @ dw
        masks.append(z > 0)
        ys.append(z * masks[-1])
        dys.append(dz * masks[-1])
    g, dg, out = 2 * ys[-1], 2 * dys[-1], np.empty_like(ws)
    for k in reversed(range(len(ws))):
        delta, ddelta = g * masks[k], dg * masks[k]
        out[k] = dys[k].T @ delta + ys[k].T @ ddelta
        g, dg = delta @ ws[k].T, ddelta @ ws[k].T + delta @ vs[k].T
    return out


def tiny_reference(params, inputs) -> float:
    """``TINY``'s loss in NumPy float64: ``sum(tanh(x @ w + b) ** 2)``."""
    h = np.tanh(np.asarray(inputs["x"], np.float64) @ params["w"] + params["b"])
    return float(np.sum(h**2))


def tiny_grad(params, inputs) -> dict[str, np.ndarray]:
    x, w, b = (np.asarray(a, np.float64) for a in (inputs["x"], params["w"], params["b"]))
    h = np.tanh(x @ w + b)
    dz = 2 * h * (1 - h**2)
    return {"w": x.T @ dz, "b": dz.sum(axis=0)}


def _tiny_jax(params, inputs):
    import jax.numpy as jnp

    return jnp.sum(jnp.tanh(inputs["x"] @ params["w"] + params["b"]) ** 2)


def _tiny_torch(params, inputs):
    import torch

    return torch.sum(torch.tanh(inputs["x"] @ params["w"] + params["b"]) ** 2)


def _tiny_generate(rng: np.random.Generator, dtype: str):
    b = rng.standard_normal(2)
    b[0] = 0.0  # an exact zero, for the -0.0 write
    return {"w": rng.standard_normal((3, 2)) / math.sqrt(3), "b": b}, {"x": rng.standard_normal((5, 3))}


#: A tiny workload of our own: two parameters, a jax and a torch implementation.
TINY = crosscheck.Workload(
    name="tiny-tanh",
    parameters={"w": (3, 2), "b": (2,)},
    inputs={"x": (5, 3)},
    reference=tiny_reference,
    implementations={"jax": _tiny_jax, "torch": _tiny_torch},
    generate=_tiny_generate,
    description="sum(tanh(x @ w + b) ** 2), for the contract tests",
)

GRID = 8.0  # the ste-stack's grid (crosscheck._workloads.ste_stack)


def ste_grad(params, inputs) -> dict[str, np.ndarray]:
    """The ste-stack's straight-through gradient: rounded forward values, ReLU masks going back."""
    ws, ys, masks = np.asarray(params["weights"], np.float64), [np.asarray(inputs["x"], np.float64)], []
    for w in ws:
        z = ys[-1] @ w
        masks.append(z > 0)
        ys.append(np.round(np.maximum(z, 0.0) * GRID) / GRID)
    g, out = 2 * ys[-1], np.empty_like(ws)
    for k in reversed(range(len(ws))):
        g = g * masks[k]
        out[k] = ys[k].T @ g
        g = g @ ws[k].T
    return {"weights": out}


# -- the misbehaviours ----------------------------------------------------------------------------------


class Unconvertible:
    """Not an array: ``np.asarray`` of it raises."""

    def __array__(self, dtype=None, copy=None):
        raise RuntimeError("this object refuses to be an array")


def _each(answer: Any, fn) -> Any:
    """``fn`` applied to the array, or to every array of a dict of them."""
    return {k: fn(v) for k, v in answer.items()} if isinstance(answer, dict) else fn(answer)


def _tracked(array: np.ndarray) -> Any:
    """A torch tensor of ``array``'s exact values that still requires grad (as a gradient computed with
    ``create_graph=True`` is): the product with a tracked 1.0 keeps every bit, -0.0 included."""
    import torch

    value = torch.from_numpy(np.array(array))
    return value * torch.ones((), dtype=value.dtype, requires_grad=True)


def _negative_zero(arrays: list[np.ndarray]) -> None:
    for array in arrays:
        zeros = np.flatnonzero((array == 0) & ~np.signbit(array))
        if zeros.size:
            array.flat[zeros[0]] = -0.0
            return
    raise RuntimeError("no exact 0.0 among the inputs to overwrite with -0.0 (use an integer case)")


def _witness(arrays: list[np.ndarray]) -> None:
    for array in arrays:
        if np.any(array == 5) or np.any((array == 0) & np.signbit(array)):
            raise RuntimeError("given inputs that a previous backend wrote to")


def _slow() -> None:
    marker = os.environ.get("HOSTILE_MARKER")
    if marker:
        with open(marker, "w") as file:
            file.write("started\n")
    time.sleep(60)
    if marker:  # a run that waited for this call: the test reads it
        with open(marker, "a") as file:
            file.write("finished\n")


def misbehave(kind: str, arrays: list[np.ndarray], right) -> Any:
    """Do ``kind`` in a backend's call on ``arrays`` (its inputs); ``right()`` is the right answer,
    rounded to the inputs' dtype (computed before any write, from the inputs as given)."""
    if not ARMED and kind != "wrong":
        return right()
    if kind == "none":
        return None
    if kind == "raises":
        raise ValueError("boom")
    if kind == "exit":
        sys.exit(0)
    if kind == "kbint":
        raise KeyboardInterrupt
    if kind == "os_exit":
        os._exit(3)
    if kind == "segfault":
        import ctypes

        ctypes.string_at(0)
    answer = right()
    if kind == "writes":
        arrays[0][(0,) * arrays[0].ndim] = 5
    elif kind == "negzero":
        _negative_zero(arrays)
    elif kind == "seterr":
        np.seterr(all="raise")
    elif kind == "torch_precision":
        import torch

        torch.set_float32_matmul_precision("medium")
    elif kind == "jax_precision":
        import jax

        jax.config.update("jax_default_matmul_precision", "bfloat16")
    elif kind == "witness":
        _witness(arrays)
    elif kind == "slow":
        _slow()
    elif kind == "requires_grad":
        return _each(answer, _tracked)
    elif kind == "not_array":
        return _each(answer, lambda _: Unconvertible())
    elif kind == "float16":
        return _each(answer, lambda a: a.astype(np.float16))
    elif kind == "wrong":
        return _each(answer, lambda a: 2 * a)
    elif kind == "noisy":
        noise = np.random.default_rng()  # unseeded: every call differs
        return _each(answer, lambda a: (a * (1 + 0.01 * noise.standard_normal(np.shape(a)))).astype(a.dtype))
    return answer


def _rounded(answer: Any, like: np.ndarray) -> Any:
    return _each(answer, lambda a: np.asarray(a).astype(like.dtype))


# -- the accumulating torch ports (never zero .grad) ----------------------------------------------------


class _Accumulator:
    """Leaf tensors kept across calls, one set per dtype; ``.grad`` is never zeroed."""

    def __init__(self) -> None:
        self.leaves: dict[str, dict[str, Any]] = {}

    def leaves_for(self, arrays: dict[str, np.ndarray]) -> dict[str, Any]:
        import torch

        key = ",".join(sorted({a.dtype.name for a in arrays.values()}))
        leaves = self.leaves.setdefault(
            key,
            {
                k: torch.zeros(a.shape, dtype=torch.from_numpy(a).dtype).requires_grad_()
                for k, a in arrays.items()
            },
        )
        with torch.no_grad():
            for k, a in arrays.items():
                leaves[k].copy_(torch.from_numpy(np.array(a)))
        return leaves


def _torch_stack_loss(w, x):
    import torch

    y = torch.from_numpy(np.array(x))
    for k in range(w.shape[0]):
        y = torch.relu(y @ w[k])
    return torch.sum(y**2)


def _torch_ste_loss(w, x):
    import torch

    y = torch.from_numpy(np.array(x))
    for k in range(w.shape[0]):
        y = torch.relu(y @ w[k])
        y = y + (torch.round(y * GRID) / GRID - y).detach()
    return torch.sum(y**2)


# -- the backends, one class per (shape, kind) ----------------------------------------------------------


class _Hostile:
    shape: ClassVar[str] = ""
    kind: ClassVar[str] = ""

    def __init__(self) -> None:
        self._acc = _Accumulator()

    def info(self) -> dict[str, str]:
        return {"framework": "numpy (tests/support/hostile.py)", "version": "", "device": "cpu"}


class StackGrad(_Hostile):
    """``grad(weights, x)`` misbehaves."""

    shape = "stack"

    def grad(self, weights, x):
        if self.kind == "accumulates" and ARMED:
            w = self._acc.leaves_for({"w": weights})["w"]
            _torch_stack_loss(w, x).backward()
            return w.grad.clone().numpy()
        return misbehave(self.kind, [weights, x], lambda: _rounded(stack_grad(weights, x), weights))


class StackHvp(_Hostile):
    """A right ``grad(weights, x)``; ``hvp(weights, x, v)`` misbehaves."""

    shape = "hvp"

    def grad(self, weights, x):
        return stack_grad(weights, x).astype(weights.dtype)

    def hvp(self, weights, x, v):
        if self.kind == "accumulates" and ARMED:
            import torch

            w = self._acc.leaves_for({"w": weights})["w"]
            (g,) = torch.autograd.grad(_torch_stack_loss(w, x), w, create_graph=True)
            torch.sum(g * torch.from_numpy(np.array(v))).backward()
            return w.grad.clone().numpy()
        return misbehave(self.kind, [weights, x, v], lambda: _rounded(stack_hvp(weights, x, v), weights))


class _WorkloadGrad(_Hostile):
    """``grad(params, inputs) -> {name: array}`` misbehaves."""

    def grad(self, params, inputs):
        like = next(iter(params.values()))
        if self.kind == "accumulates" and ARMED:
            leaves = self._acc.leaves_for(params)
            self._torch_loss(leaves, inputs).backward()
            return {k: leaf.grad.clone().numpy() for k, leaf in leaves.items()}
        arrays = [*params.values(), *inputs.values()]
        return misbehave(self.kind, arrays, lambda: _rounded(self._right(params, inputs), like))


class TinyGrad(_WorkloadGrad):
    shape = "tiny"

    @staticmethod
    def _right(params, inputs):
        return tiny_grad(params, inputs)

    @staticmethod
    def _torch_loss(leaves, inputs):
        import torch

        return _tiny_torch(leaves, {"x": torch.from_numpy(np.array(inputs["x"]))})


class SteGrad(_WorkloadGrad):
    shape = "ste"

    @staticmethod
    def _right(params, inputs):
        return ste_grad(params, inputs)

    @staticmethod
    def _torch_loss(leaves, inputs):
        return _torch_ste_loss(leaves["weights"], inputs["x"])


SHAPES = {cls.shape: cls for cls in (StackGrad, StackHvp, TinyGrad, SteGrad)}


def _backend_class(base: type, kind: str) -> type:
    attributes: dict[str, Any] = {"kind": kind, "name": f"{base.shape}-{kind}"}
    if kind == "markup":
        attributes["name"] = MARKUP_NAME
    if kind == "float16":
        attributes["output_dtype"] = "float16"
    return type(f"{base.__name__}_{kind}", (base,), attributes)


for _shape, _base in SHAPES.items():
    for _kind in KINDS:
        globals()[f"{_shape}_{_kind}"] = _backend_class(_base, _kind)


def make(shape: str, kind: str) -> Any:
    """A fresh backend of ``shape`` (stack, hvp, tiny, ste) that misbehaves as ``kind``."""
    return globals()[f"{shape}_{kind}"]()


def name(shape: str, kind: str) -> str:
    """The name the backend ``hostile:<shape>_<kind>`` reports under."""
    return globals()[f"{shape}_{kind}"].name
