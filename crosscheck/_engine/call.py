"""The guarded call: every call into a backend, on every path, goes through ``guarded``.

Modelled on pytest's ``CallInfo.from_call``: whatever the backend does is recorded, never let escape.

- Anything it raises, ``BaseException`` included (a backend's ``sys.exit`` or ``KeyboardInterrupt`` is
  that backend's failure, not the end of the run), is a one-line reason. A real Ctrl-C from the user
  still propagates, so the run can stop and report what finished: the Ctrl-C policy (``interrupts``,
  made by ``user_interrupts``) is a parameter of the call.
- Its inputs are compared bit for bit with a private copy taken before the call (``-0.0`` over ``0.0``
  and NaN payloads included) and put back when it wrote to them. Arrays made for one call only
  (``Fresh``: the point's arrays cast to the other dtype for a re-run) are handed without a second
  copy and compared afterwards with their source cast the same way, a block at a time (``Cast``).
- Framework state it may change (NumPy's error state; each imported framework's, as its folder's
  ``state.py`` reads it: JAX's matmul precision and x64 flag, PyTorch's default dtype, float32 matmul
  precision and grad mode) is read before and restored after (``framework_state``); what it changed is noted,
  not failed.
- What it returns is converted once (``returned.to_array``): ``None``, something that is not an array, an
  object array are failures with a precise message; a framework's own array is converted by its
  folder's ``arrays.py`` (a PyTorch tensor that requires grad is detached, safe: only the values are
  compared, and the record says so).
- The run's placement (``placement``: one ``Placement`` per framework that declares settings, where its
  side runs and the arithmetic it runs under: ``Execution.placement``) is in effect inside the call, in
  the thread that runs it, each record applied by its framework's folder (``state.placed``), and gone
  after it: read before and after, it is never noted as the backend's change.
- With a ``timeout``, the call runs in a daemon thread and the caller stops waiting at the deadline
  (Python cannot stop a thread: it is left running, on its own copies of the inputs; ``--isolate``
  runs a backend in a worker process, which can be stopped).
"""

from __future__ import annotations

import contextlib
import dataclasses
import signal
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar, cast

import numpy as np

from crosscheck._backends import Placement, framework_named, handed
from crosscheck._compare.dtypes import aligned_copy, as_dtype
from crosscheck._engine.framework_state import framework_state, restore_state
from crosscheck._errors import Interrupted, Interrupts, describe, reraise_user_interrupt

T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What one guarded call gave: ``value`` (None when it failed), ``error`` (one line, or None),
    ``seconds`` and ``notes`` (``converted``, ``state_changed``)."""

    value: Any
    error: str | None
    seconds: float
    notes: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.error is None


@contextlib.contextmanager
def user_interrupts() -> Iterator[Interrupts]:
    """A run's Ctrl-C policy, to hand to its guarded calls: it tells the user's Ctrl-C (SIGINT) apart
    from a ``KeyboardInterrupt`` a backend raises itself.

    Only in the main thread (elsewhere no signal arrives, so every KeyboardInterrupt is a backend's:
    the policy is never pressed).
    """
    interrupts = Interrupts()
    if threading.current_thread() is not threading.main_thread():
        yield interrupts
        return
    previous = signal.getsignal(signal.SIGINT)

    def handler(signum: int, frame: Any) -> None:
        interrupts.press()
        raise Interrupted

    signal.signal(signal.SIGINT, handler)
    try:
        yield interrupts
    finally:
        signal.signal(signal.SIGINT, previous)


class BackendFailure(Exception):
    """Raised inside a guarded call when the failure is already one line (a deadline passed, a worker
    process died): its message is the record's error as it stands, without the exception's type."""


def guarded(
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    *,
    inputs: Mapping[str, np.ndarray],
    pristine: Mapping[str, np.ndarray | Cast] | None = None,
    timeout: float | None = None,
    interrupts: Interrupts | None = None,
    placement: Sequence[Placement] = (),
) -> Outcome:
    """Call ``fn(*args)``; never raises, except for the user's own Ctrl-C (``Interrupted``).

    ``inputs`` are the arrays the backend may see, by name: compared bit for bit after the call with
    ``pristine`` (the arrays they were copied from, which no backend holds, or a ``Cast`` of one: an
    input made from it for this call only, put back when written), or, without it, with copies taken
    here (and put back when written). A write is the call's error and noted (``notes["wrote"]``).
    ``timeout``: seconds before the call is given up.
    ``interrupts``: the run's Ctrl-C policy (``user_interrupts``); None, with no engine above: only an
    ``Interrupted`` is the user's, any other ``KeyboardInterrupt`` the backend's failure.
    ``placement``: the run's (``Execution.placement``), in effect inside the call (``placed``).
    """
    names, live = list(inputs), list(inputs.values())
    before: list[np.ndarray | Cast]
    if pristine is None:
        before, restore = [np.array(a, copy=True) for a in live], True
    else:
        before, restore = [pristine[n] for n in names], False
    state = framework_state()
    start = time.perf_counter()
    value, error = None, None
    try:
        with handed.handing(live, [_test(p) for p in before]):  # what a backend may ask while it runs
            value = within(timeout, _placed_call, placement, fn, *args)
    except BackendFailure as exc:
        error = str(exc)
    except BaseException as exc:
        reraise_user_interrupt(exc, interrupts)
        error = describe(exc)
    seconds = time.perf_counter() - start
    notes: dict[str, Any] = {}
    changed = restore_state(state)
    if changed:
        notes["state_changed"] = changed
    written = _written(live, before, restore=restore)
    if written:
        notes["wrote"] = wrote = f"modified its inputs ({_listed([names[i] for i in written])})"
        error = error or f"{wrote}; backends must not write to them"
    return Outcome(None if error else value, error, seconds, notes)


@contextlib.contextmanager
def placed(placement: Sequence[Placement]) -> Iterator[None]:
    """The run's placement in effect, for one call: each record applied by its framework's folder
    (``state.placed``), in order, and undone in reverse; a record left alone (every setting its
    default) leaves its framework as it is, and imports nothing."""
    with contextlib.ExitStack() as stack:
        for record in placement:
            if not record.left_alone:
                framework = framework_named(record.framework)
                if framework is None:
                    raise ValueError(f"a placement of framework `{record.framework}`, which is not declared")
                stack.enter_context(framework.module("state").placed(record))
        yield


def _placed_call(placement: Sequence[Placement], fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` with the run's placement in effect, entered in the thread that calls it (a
    framework's scoped settings may be per thread, as JAX's are: a call under a timeout runs in a
    thread of its own)."""
    with placed(placement):
        return fn(*args)


def hand(
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    known: Mapping[int, str],
    *,
    copy: bool = True,
    fresh: Fresh | None = None,
) -> tuple[tuple[Any, ...], dict[str, Any], dict[str, np.ndarray], dict[str, np.ndarray | Cast]]:
    """What a backend is handed: ``(args, kwargs, handed, pristine)``.

    Every array among the arguments (at the top, or a value of a dict argument) becomes a private copy
    (``copy``), so a backend never holds an array anyone else uses: it cannot change them by writing
    now or later (from a thread it left running, say); an array ``fresh`` made for this call only is
    handed as it is (once: a later call copies it). ``handed`` names what is handed (``known``: names
    of arrays by ``id``, the point's; else the dict key or ``argument N``), ``pristine`` what each is
    compared with after the call, by the same names: the array it was copied from, or the ``Cast`` of
    the source a fresh one was made from.
    """
    handed: dict[str, np.ndarray] = {}
    pristine: dict[str, np.ndarray | Cast] = {}

    def give(array: np.ndarray, name: str) -> np.ndarray:
        source = fresh.take(array) if fresh is not None else None
        name = unique(known.get(id(array if source is None else source), name), handed)
        if source is not None:
            handed[name], pristine[name] = array, Cast(source, array.dtype)
            return array
        handed[name] = aligned_copy(array) if copy else array  # a JAX backend reads it in place
        pristine[name] = array
        return handed[name]

    new_args, kwargs = walk_arrays(list(args), kwargs, give)
    return tuple(new_args), kwargs, handed, pristine


@dataclasses.dataclass(frozen=True)
class Cast:
    """What an input made for one call (``Fresh``) is compared with after it: ``source`` cast to
    ``dtype``, a block of ``BLOCK`` entries at a time (no copy of the whole array is kept or made)."""

    source: np.ndarray
    dtype: np.dtype

    #: Entries cast at once to compare (8 MiB of float64).
    BLOCK = 1 << 20

    def same(self, array: np.ndarray) -> bool:
        """Whether ``array`` holds the bits of ``source`` cast to ``dtype``."""
        if array.shape != self.source.shape or array.dtype != self.dtype:
            return False
        if not (array.flags.c_contiguous and self.source.flags.c_contiguous):
            return handed.same_bits(array, self.source.astype(self.dtype))
        a, s = array.reshape(-1), self.source.reshape(-1)
        step = self.BLOCK
        return all(
            handed.same_bits(a[i : i + step], s[i : i + step].astype(self.dtype))
            for i in range(0, a.size, step)
        )

    def restore(self, array: np.ndarray) -> None:
        with contextlib.suppress(ValueError, TypeError):
            array[...] = self.source


class Fresh:
    """Arrays made for one call only (``make``: the point's arrays cast to a dtype, as ``as_dtype``
    casts them), each remembered with its source until a call is handed it (``take``): that call gets
    it without a second copy, and is checked against the source cast the same way (``Cast``). Held by
    weak reference: an array dropped unhanded is forgotten, and an ``id`` reused is never mistaken."""

    def __init__(self) -> None:
        self._made: dict[int, tuple[weakref.ref[np.ndarray], np.ndarray]] = {}

    def make(self, arrays: Mapping[str, np.ndarray], dtype: str) -> dict[str, np.ndarray]:
        made = as_dtype(dict(arrays), dtype)
        for name, array in made.items():
            self._made[id(array)] = (weakref.ref(array, self._forget), arrays[name])
        return made

    def take(self, array: np.ndarray) -> np.ndarray | None:
        """The source ``array`` was made from, when it was made here and not handed yet (then never
        again: a second call copies it, as any array)."""
        entry = self._made.get(id(array))
        if entry is None or entry[0]() is not array:
            return None
        del self._made[id(array)]
        return entry[1]

    def _forget(self, ref: weakref.ref[np.ndarray]) -> None:
        """An array made here was dropped unhanded: its entry goes (the one its ``weakref`` keys)."""
        for key, entry in list(self._made.items()):
            if entry[0] is ref:
                del self._made[key]


class Once(dict):
    """Arrays made for one call (``Caller.cast(once=True)``), emptied by the call they are handed to when
    it returns, before its result is converted: the caller keeps the dict, not its arrays (Python keeps
    a call's arguments until it returns, whatever the callee drops)."""


def walk_arrays(
    args: list[Any], kwargs: dict[str, Any], fn: Callable[[np.ndarray, str], np.ndarray]
) -> tuple[list[Any], dict[str, Any]]:
    """``args`` and ``kwargs`` with ``fn(array, name)`` in place of each array (at the top or a dict's
    value), in one fixed order: the parent and a worker name the same arrays alike."""
    new_args = [_each(a, f"argument {i + 1}", fn) for i, a in enumerate(args)]
    return new_args, {k: _each(v, k, fn) for k, v in kwargs.items()}


def _each(value: object, name: str, fn: Callable[[np.ndarray, str], np.ndarray]) -> object:
    """``walk_arrays`` of one argument. A function of the module, not a closure that calls itself: that
    was a reference cycle holding ``fn``, and the private copies it keeps, past the guarded call until
    the garbage collector ran."""
    if isinstance(value, np.ndarray):
        return fn(value, name)
    if isinstance(value, dict) and any(isinstance(v, np.ndarray) for v in value.values()):
        return {k: _each(v, str(k), fn) for k, v in value.items()}
    return value


def unique(name: str, taken: Mapping[str, Any]) -> str:
    """``name``, or ``name#2``, ``name#3``... when it is taken."""
    candidate, n = name, 2
    while candidate in taken:
        candidate, n = f"{name}#{n}", n + 1
    return candidate


def within(timeout: float | None, fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)``, given up after ``timeout`` seconds (``BackendFailure``); None: no deadline.

    The call runs in a daemon thread that is left running past the deadline (Python cannot stop a
    thread); it holds only the copies of the inputs it was given, and ends with the process.
    """
    if timeout is None:
        return fn(*args)
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn(*args)
        except BaseException as exc:  # re-raised in the caller's thread, guarded there
            box["error"] = exc

    thread = threading.Thread(target=target, name="crosscheck backend call", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise BackendFailure(
            f"did not finish within {timeout:g} s (the timeout); it was left running in a background "
            "thread (with --isolate its worker process is stopped instead)"
        )
    if "error" in box:
        raise box["error"]
    return cast(T, box.get("value"))  # what ``fn`` returned: the thread finished without an error


def _test(before: np.ndarray | Cast) -> Callable[[np.ndarray], bool]:
    """Whether a handed array still holds what it was handed with (``handed.test_of``): ``before``'s
    bits, or its source's cast (a ``Cast``); the comparison ``_written`` makes after the call."""
    if isinstance(before, Cast):
        return before.same
    return lambda array: handed.same_bits(array, before)


def _listed(names: list[str]) -> str:
    quoted = [f"`{n}`" for n in names]
    return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " and " + quoted[-1]


def _written(live: list[np.ndarray], before: list[np.ndarray | Cast], *, restore: bool) -> list[int]:
    """Which inputs were written (compared as bits, not values); with ``restore``, put back (an input
    made for the call, ``Cast``, always: its maker may still hold it)."""
    written = []
    for i, (a, p) in enumerate(zip(live, before, strict=True)):
        if isinstance(p, Cast):
            if not p.same(a):
                written.append(i)
                p.restore(a)
        elif not handed.same_bits(a, p):
            written.append(i)
            if restore:
                with contextlib.suppress(ValueError, TypeError):
                    a[...] = p
    return written
