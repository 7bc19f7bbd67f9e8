"""User callables that misbehave, for ``tests/test_user_code.py``: a tiny ``Workload`` or ``Port`` (or a
backend factory) whose one callable exits, raises, raises ``KeyboardInterrupt`` or writes to the arrays
it receives. Named ``CALLABLE_BEHAVIOUR`` (``usercode:generate_exit``) and built when first asked for
(the module's ``__getattr__``), so an import string reaches each one, as a user's module would.
"""

from __future__ import annotations

import ctypes
import functools
import os
import signal
import sys
from typing import Any

import numpy as np

import crosscheck

BEHAVIOURS = ("exit", "raises", "kbint", "writes", "dies", "crashes", "hangs", "holds", "interrupts")


def act(behaviour: str, arrays: Any = None) -> None:
    """Do ``behaviour``: ``sys.exit(0)``, raise, raise ``KeyboardInterrupt`` (not a Ctrl-C), write to the
    first array of ``arrays`` (a dict, or one array); or, for a contained run
    (``tests/engine/process/test_contain.py``), end the process with ``os._exit(0)``, crash it (a
    segfault), hang in Python, hang holding the GIL (C's ``sleep`` through ``ctypes.PyDLL``), or press
    Ctrl-C in the parent (SIGINT to it: only in a contained run's worker) and hang until that stops it."""
    if behaviour == "exit":
        sys.exit(0)
    if behaviour == "dies":
        os._exit(0)
    if behaviour == "crashes":
        ctypes.string_at(0)
    if behaviour == "hangs":
        while True:
            pass
    if behaviour == "holds":
        ctypes.PyDLL(None).sleep(600)
    if behaviour == "interrupts":
        if "crosscheck._engine.process.contain_worker" not in sys.modules:  # never signal a process not ours
            raise RuntimeError("`interrupts` runs only in a contained run's worker")
        os.kill(os.getppid(), signal.SIGINT)
        while True:
            pass
    if behaviour == "raises":
        raise RuntimeError("boom")
    if behaviour == "kbint":
        raise KeyboardInterrupt
    if behaviour == "writes":
        array = next(iter(arrays.values())) if isinstance(arrays, dict) else arrays
        np.asarray(array)[...] = 0.0


# -- a user's Workload ---------------------------------------------------------------------------------


def _torch_loss(params: dict, inputs: dict) -> Any:
    return (params["w"] * inputs["x"]).sum() ** 2


def _reference(params: dict, inputs: dict) -> float:
    return float(np.sum(params["w"] * inputs["x"]) ** 2)


def workload(callable_: str, behaviour: str) -> crosscheck.Workload:
    """A workload of one 3-vector whose ``generate``, ``reference`` or torch implementation misbehaves."""

    def generate(rng: np.random.Generator, dtype: str) -> tuple[dict, dict]:
        act(behaviour)
        return {"w": rng.standard_normal(3)}, {"x": rng.standard_normal(3)}

    def reference(params: dict, inputs: dict) -> float:
        act(behaviour, params)
        return _reference(params, inputs)

    def torch_loss(params: dict, inputs: dict) -> Any:
        act(behaviour, inputs)
        return _torch_loss(params, inputs)

    return crosscheck.Workload(
        name="w",
        parameters={"w": (3,)},
        inputs={"x": (3,)},
        reference=reference if callable_ == "reference" else _reference,
        implementations={"torch": torch_loss if callable_ == "implementation" else _torch_loss},
        generate=generate if callable_ == "generate" else None,
    )


def factory(behaviour: str) -> Any:
    """A workload factory (an import string's zero-argument function) that misbehaves."""

    def make() -> crosscheck.Workload:
        act(behaviour)
        return workload("none", "none")

    return make


def backend_factory(behaviour: str) -> Any:
    """A backend factory (an import string's zero-argument function) that misbehaves."""

    def make_backend() -> Any:
        act(behaviour)
        return lambda weights, x: np.zeros_like(weights)

    return make_backend


# -- a Port: a PyTorch Linear and its Flax linen port ------------------------------------------------------


def port(callable_: str, behaviour: str) -> crosscheck.Port:
    """A port of a ``torch.nn.Linear(3, 2)`` to a linen ``Dense(2)`` whose one callable misbehaves."""
    import flax.linen as nn
    import torch

    class TorchLinear(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = torch.nn.Linear(3, 2)

        def forward(self, x: Any) -> Any:
            return self.fc(x)

        def state_dict(self, *args: Any, **kwargs: Any) -> Any:
            if callable_ == "state_dict":
                act(behaviour)
            return super().state_dict(*args, **kwargs)

    class FlaxLinear(nn.Module):
        def setup(self) -> None:
            if callable_ == "setup":
                act(behaviour)
            self.fc = nn.Dense(2)

        def __call__(self, x: Any) -> Any:
            return self.fc(x)

    def inputs(rng: np.random.Generator, dtype: str) -> dict:
        act(behaviour)
        return {"x": rng.standard_normal((4, 3))}

    def jax_inputs(given: dict) -> dict:
        act(behaviour, given)
        return given

    def misbehaves(module: Any, given: dict) -> Any:
        act(behaviour, given)
        return module(**given)

    def loss(output: Any) -> Any:
        act(behaviour)
        return (output**2).sum()

    torch.manual_seed(0)
    chosen = {
        "inputs": {"inputs": inputs},
        "jax_inputs": {"jax_inputs": jax_inputs},
        "torch_call": {"torch_call": misbehaves},
        "jax_call": {"jax_call": misbehaves},
        "loss": {"loss": loss},
    }.get(callable_, {})
    given = {"inputs": {"x": np.random.default_rng(0).standard_normal((4, 3))}, **chosen}
    return crosscheck.Port(name="p", torch=TorchLinear().eval(), jax=FlaxLinear(), **given)


#: What builds ``CALLABLE`` (``usercode:CALLABLE_BEHAVIOUR``) with its behaviour.
BUILDERS = {
    **{name: functools.partial(workload, name) for name in ("generate", "reference", "implementation")},
    "factory": factory,
    "backend": backend_factory,
    **{
        name: functools.partial(port, name)
        for name in ("inputs", "jax_inputs", "state_dict", "setup", "torch_call", "jax_call", "loss")
    },
}


@functools.cache
def __getattr__(name: str) -> Any:
    callable_, _, behaviour = name.rpartition("_")
    if callable_ not in BUILDERS or behaviour not in BEHAVIOURS:
        raise AttributeError(name)
    return BUILDERS[callable_](behaviour)


# -- a Port whose PyTorch forward misbehaves -----------------------------------------------------------

#: What ``misbehaving_port``'s PyTorch forward does, and the words its failure says.
FORWARDS = {
    "mutates-weights": "changes its parameter `fc.weight`",
    "updates-buffer": "updates its buffer `count` in place",
    "second-call": "gives another result on its second call",
}


def writing_port(*, offset: int = 2, ported: int | None = None) -> crosscheck.Port:
    """A healthy port whose PyTorch forward writes to its input in place, as Hugging Face's XGLM does
    (``position_ids += self.offset``), and whose linen port adds ``offset`` to its own positions (or
    ``ported``: another offset, a planted bug)."""
    import flax.linen as nn
    import torch

    class TorchNet(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = torch.nn.Linear(3, 4)
            self.positions = torch.nn.Embedding(8, 4)

        def forward(self, x: Any, position_ids: Any) -> Any:
            position_ids += offset
            return self.fc(x) + self.positions(position_ids)

    shift = offset if ported is None else ported

    class FlaxNet(nn.Module):
        @nn.compact
        def __call__(self, x: Any, position_ids: Any) -> Any:
            return nn.Dense(4, name="fc")(x) + nn.Embed(8, 4, name="positions")(position_ids + shift)

    torch.manual_seed(0)
    inputs = {"x": np.random.default_rng(0).standard_normal((4, 3)), "position_ids": np.arange(4)}
    return crosscheck.Port(name="writes", torch=TorchNet().eval(), jax=FlaxNet(), inputs=inputs)


def misbehaving_port(forward: str) -> crosscheck.Port:
    """A port of a Linear (plus a buffer it adds) to a linen ``Dense``, whose PyTorch forward does
    ``forward`` (a key of ``FORWARDS``; ``"none"``: nothing wrong, the healthy pair)."""
    import flax.linen as nn
    import torch

    class TorchNet(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = torch.nn.Linear(3, 2)
            self.register_buffer("count", torch.zeros(2))
            self.calls = 0

        def forward(self, x: Any) -> Any:
            self.calls += 1
            if forward == "mutates-weights":
                with torch.no_grad():
                    self.fc.weight.mul_(1.01)
            if forward == "updates-buffer":
                self.count.add_(1.0)
            scale = 1 + 0.01 * self.calls if forward == "second-call" else 1.0
            return self.fc(x) * scale + self.count

    class FlaxNet(nn.Module):
        @nn.compact
        def __call__(self, x: Any) -> Any:
            return nn.Dense(2, name="fc")(x)

    torch.manual_seed(0)
    inputs = {"x": np.random.default_rng(0).standard_normal((4, 3))}
    return crosscheck.Port(name="p", torch=TorchNet().eval(), jax=FlaxNet(), inputs=inputs)
