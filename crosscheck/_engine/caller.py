"""The guarded call bound to a point's arrays (``Caller``): what the driver, the judges and a replay call
every backend through.

Each call is ``crosscheck._engine.call.guarded``: private copies of the point's arrays handed (or arrays
made for that one call, ``cast``), anything raised a one-line failure, writes to the inputs found bit
for bit, each imported framework's state restored; a backend in a worker process is called there
(``RemoteMethod``), guarded by the worker alike.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from crosscheck._backends import Placement
from crosscheck._backends.handed import let_go
from crosscheck._engine.call import Fresh, Once, Outcome, guarded, hand
from crosscheck._engine.placement import Placing
from crosscheck._engine.process.isolate import RemoteMethod
from crosscheck._engine.returned import to_array, to_arrays
from crosscheck._errors import Interrupts
from crosscheck._types import Loaded

_CONVERTERS: dict[str, Callable[..., tuple[Any, str | None, dict[str, str]]]] = {
    "array": to_array,
    "arrays": to_arrays,
}


class Caller(Placing):
    """The guarded call bound to a point's arrays: ``call(fn, *args, convert=None, **kwargs)``.

    A backend is handed private copies of the arrays (``hand``) and never the point's own, which are
    what each copy is compared with after the call; ``timeout`` bounds each call. Arrays made for one
    call (``cast``) are handed without a second copy. A method of a backend in a worker process
    (``isolate``) is sent there, guarded by the worker alike. ``interrupts``: the run's Ctrl-C policy
    (``user_interrupts``), handed to each call. Every call that wrote to its inputs is kept in
    ``wrote`` (``(the backend whose method it called, or None; phase; error)``): the driver fails that
    backend even where a judge set the call's outcome aside (a re-run that only measures rounding).
    """

    def __init__(
        self,
        arrays: Mapping[str, np.ndarray],
        *,
        timeout: float | None = None,
        interrupts: Interrupts | None = None,
        placement: Sequence[Placement] = (),
    ) -> None:
        self.arrays, self.timeout, self.interrupts = arrays, timeout, interrupts
        self.placement = tuple(placement)
        self._names = {id(a): name for name, a in arrays.items()}
        self._fresh = Fresh()
        #: The record the driver is filling (a backend's name), to which a write of no backend's is owed.
        self.phase: str | None = None
        self.wrote: list[tuple[Loaded | None, str | None, str]] = []

    def __call__(
        self, fn: Callable[..., Any], *args: Any, convert: str | None = None, **kwargs: Any
    ) -> Outcome:
        out = self._guarded(fn, args, kwargs)  # what it handed is freed with its frame
        for given in (*args, *kwargs.values()):
            if isinstance(given, Once):  # made for this call only: its arrays go before the conversion
                given.clear()
        let_go()  # what the call was handed is freed now, where a framework read it in place
        notes = dict(out.notes)
        if "wrote" in notes:
            owner = fn.backend if isinstance(fn, RemoteMethod) else getattr(fn, "__self__", None)
            self.wrote.append((owner, self.phase, f"{notes.pop('wrote')}; backends must not write to them"))
        if out.error or convert is None:
            return dataclasses.replace(out, notes=notes)
        box = [out.value]  # the result is converted without a second reference held here
        out = dataclasses.replace(out, value=None)
        value, error, more = _CONVERTERS[convert](box.pop(), interrupts=self.interrupts)
        return Outcome(value, error, out.seconds, {**notes, **more})

    def _guarded(self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Outcome:
        remote = getattr(fn, "remote", None) if isinstance(fn, RemoteMethod) else None
        args, kwargs, handed, pristine = hand(
            args, kwargs, self._names, copy=remote is None, fresh=self._fresh
        )
        if remote is not None:
            return remote(args, kwargs, names=list(handed), timeout=self.timeout, interrupts=self.interrupts)
        call = lambda: fn(*args, **kwargs)  # noqa: E731
        return guarded(
            call,
            (),
            inputs=handed,
            pristine=pristine,
            timeout=self.timeout,
            interrupts=self.interrupts,
            placement=self.placement,
        )

    def cast(
        self, arrays: Mapping[str, np.ndarray], dtype: str, *, once: bool = False
    ) -> dict[str, np.ndarray]:
        """Fresh arrays for one call: ``arrays`` (the point's) with every float in ``dtype`` (as
        ``as_dtype``). The next call they are passed to gets them without a second copy (the caller
        drops them after it; a later call copies them), and a backend that writes to one is caught:
        after the call each is compared with its source cast the same way, a block at a time.
        ``once``: the dict is emptied by the call it is handed to, when the call returns and before its
        result is converted (``Once``): the arrays are freed then, where the caller holds no other
        reference to them (a float64 re-run's parameters were held beside the float64 copy
        of its gradient, 8 bytes a parameter each)."""
        made = self._fresh.make(arrays, dtype)
        return Once(made) if once else made

    @staticmethod
    def failure(error: str) -> Outcome:
        return Outcome(None, error, 0.0)
