"""JAX programs compiled in one check and kept for the next, run again only where they are the same
program (``Kept``).

JAX keeps a jitted function's traces by the function's identity and its arguments' types, and a trace
bakes in whatever the Python code read while it ran: a module-level flag read by a Flax module's
``__call__``, a closure's variable of a function port, a global read by a helper of a workload's
loss. A jitted function kept from one check to the next would run the first check's program after
the code changed between them (a port fixed, or broken, in a notebook, and checked again). So each
check traces afresh: its first call jits a new function object, of which JAX has traced nothing
(``Kept.renew`` starts a check), and a program compiled in an earlier check is run again only where
the new trace lowers to the same program (``Program``): the StableHLO text XLA compiles (every
operation and constant, bit for bit: compared by its SHA-256), the same structure of arguments and
results, for the same devices. A program that calls back into Python code is compiled afresh in
each check (a compiled program calls the functions of the trace it was compiled from; JAX's text
shows none of them), save crosscheck's own recorders, which read everything they say from their
arguments (``steps.later``: they carry ``MARK``). Tracing and lowering cost a fraction of compiling:
``docs/measurements/zoo.md``, "A second check in one process".

Imported only by the JAX sides (it imports jax).
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import numpy as np
from jax.extend import core

from crosscheck._types import PyTree

#: The first argument of crosscheck's own recorders' call backs (``steps.later``): a call back that
#: carries it reads everything it does from its arguments, which the program's text holds.
MARK = np.uint32(0xC0DEC4EC)
#: Primitives whose Python functions are used while tracing only: their compiled program is their
#: ``call_jaxpr`` (a custom derivative rule is traced into the program that differentiates).
TRACED_ONLY = frozenset({"custom_jvp_call", "custom_vjp_call", "custom_vjp_call_jaxpr"})
#: The parameters that are callable yet say what they are (a nested ``jax.jit``'s ``ctx_mesh``).
MESHES = tuple(
    getattr(jax.sharding, name) for name in ("Mesh", "AbstractMesh") if hasattr(jax.sharding, name)
)
#: Programs a ``Kept`` holds across checks (a check compiles one per precision, dtype and device).
KEEP = 8


class Program(NamedTuple):
    """What a compiled program is the same for: its StableHLO text's digest, its arguments' and
    results' structures, and where it runs (``placement``)."""

    text: bytes
    arguments: Any
    results: Any
    placement: tuple[Any, ...]


def placement(args: tuple[Any, ...]) -> tuple[Any, ...]:
    """Where a call's program runs: the default device set (``jax.default_device``) and each array
    argument's sharding (a committed array's device is no part of its trace)."""
    leaves = jax.tree_util.tree_leaves(args)
    return (jax.config.jax_default_device, *(getattr(leaf, "sharding", None) for leaf in leaves))


def _marked(eqn: Any) -> bool:
    """Whether ``eqn`` is one of crosscheck's own recorders (``MARK`` its first argument)."""
    first = eqn.invars[0] if eqn.invars else None
    return (
        eqn.primitive.name == "debug_callback"
        and isinstance(first, core.Literal)
        and np.asarray(first.val).dtype == MARK.dtype
        and np.asarray(first.val) == MARK
    )


def _runs_python(value: Any) -> bool:
    """Whether a primitive's parameter is callable: a Python function the compiled program may call (a
    call back, however JAX wraps it), or anything else callable but a class or a mesh (which say what
    they are in the program's text)."""
    values = value if isinstance(value, tuple) else (value,)
    return any(callable(v) and not isinstance(v, (type, *MESHES)) for v in values)


def calls_back(jaxpr: Any) -> bool:
    """Whether the program of ``jaxpr`` (a jaxpr or a closed one, its inner jaxprs too) calls Python
    code when it runs, other than crosscheck's own recorders."""
    inner = getattr(jaxpr, "jaxpr", jaxpr)
    for eqn in inner.eqns:
        if eqn.primitive.name not in TRACED_ONLY and not _marked(eqn):
            if any(_runs_python(v) for v in eqn.params.values()):
                return True
    return any(calls_back(sub) for sub in core.subjaxprs(inner))


def program(traced: Any, lowered: Any, where: tuple[Any, ...]) -> Program | None:
    """The ``Program`` of a trace and its lowering (None: it calls back into Python code, ``calls_back``)."""
    if calls_back(traced.jaxpr):
        return None
    text = hashlib.sha256(lowered.as_text().encode()).digest()
    return Program(text, lowered.in_tree, lowered.out_tree, where)


def _own(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` as a function object of its own: JAX has traced nothing of it."""

    @functools.wraps(fn)
    def own(*args: Any) -> PyTree:
        return fn(*args)

    return own


class Kept:
    """One function's compiled programs, kept from check to check; each check traces afresh.

    ``kept(fn, *args)`` is ``fn(*args)`` compiled: the check's first call jits ``fn`` as a function
    object of its own (``_own``), and every call runs the program compiled for its trace, found among
    those kept from earlier checks where one is the same ``Program``, else compiled. Within a check a
    trace is made once per kind of arguments (JAX's cache of the check's jitted function), and later
    calls pass ``fn`` only to say what they run: the check's first is traced.
    """

    def __init__(self, keep: int = KEEP) -> None:
        self._keep = keep
        self._jit: Any = None  # the check's jitted function
        self._runs: dict[tuple[int, tuple[Any, ...]], tuple[Any, Any]] = {}  # the check's traces' programs
        self._programs: list[tuple[Program, Any]] = []  # compiled, kept across checks: the newest last
        #: Compilations made (the programs found again are not).
        self.compiled = 0

    def renew(self) -> None:
        """A new check: its calls are traced afresh (the compiled programs stay, for the same program)."""
        self._jit, self._runs = None, {}

    def __call__(self, fn: Callable[..., Any], *args: Any) -> PyTree:
        if self._jit is None:
            self._jit = jax.jit(_own(fn))
        traced = self._jit.trace(*args)
        where = placement(args)
        key = (id(traced.jaxpr), where)
        run = self._runs.get(key)
        if run is None:  # the trace is held with its program: its id stays its own
            run = self._runs[key] = (traced.jaxpr, self._compiled(traced, where))
        return run[1](*args)

    def _compiled(self, traced: Any, where: tuple[Any, ...]) -> jax.stages.Compiled:
        lowered = traced.lower()
        made = program(traced, lowered, where)
        for i, (kept, compiled) in enumerate(self._programs):
            if made is not None and kept == made:
                self._programs.append(self._programs.pop(i))
                return compiled
        compiled = lowered.compile()
        self.compiled += 1
        if made is not None:
            self._programs = [*self._programs, (made, compiled)][-self._keep :]
        return compiled
