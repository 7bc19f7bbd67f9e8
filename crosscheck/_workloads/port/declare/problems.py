"""The problems of a port's declaration, collected while it is prepared and said together.

A port is prepared in steps (its overrides, the mapping table, a ``convert``, the listed intermediates,
the inputs' names, ``unused``); a step that finds a problem records it here and the preparation goes
on, so that one refusal names every problem: a wrong ``jax_intermediates`` shape no longer hides an
ambiguous mapping behind it. One problem is raised as it was found (its type, its one line, the port
named); several are one ``Refused``: a head line, then one line each. The refusal comes when the port
is prepared, before any backend is loaded, any oracle or compilation runs, any module is captured.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from crosscheck._errors import DetailedError, Refused, UserCodeFailed, one_line

T = TypeVar("T")

#: What a refusal with mapping problems adds: where the whole table is (the command line prints it).
TABLE = "print(port.mapping) shows the table"


class Problems:
    """The problems found so far of the port named by ``where`` (``port `p```), in the order found."""

    def __init__(self, where: str) -> None:
        self.where = where
        self.found: list[ValueError | TypeError] = []

    def __bool__(self) -> bool:
        return bool(self.found)

    def add(self, exc: ValueError | TypeError) -> None:
        self.found.append(exc)

    def extend(self, found: Sequence[ValueError | TypeError]) -> None:
        self.found.extend(found)

    def run(self, fn: Callable[..., T], *args: Any) -> T | None:
        """``fn(*args)``, or None once the ``ValueError`` or ``TypeError`` it raised is recorded."""
        try:
            return fn(*args)
        except (ValueError, TypeError) as exc:
            self.add(exc)
            return None

    def refuse(self, mapping: Sequence[str] = (), table: str = "") -> None:
        """Raise every problem found, then ``mapping`` (the mapping table's problems, one line each;
        ``table``: the refused table, the details the command line prints); return when there is none.

        Raises:
            ValueError, TypeError: one problem: as it was found, the port named (a mapping problem: a
                ``DetailedError`` with the table); several: one ``Refused`` listing them all.
        """
        lines = [self._line(exc) for exc in self.found] + [one_line(m) for m in mapping]
        if len(lines) > 1:
            raise Refused(self.where, lines, table, hint=TABLE if mapping else "")
        if self.found:
            raise self._alone(self.found[0])
        if mapping:
            raise DetailedError(f"{self.where}: {lines[0]}", table)

    def _line(self, exc: BaseException) -> str:
        """A problem's line, without the port's name (the head line names it once)."""
        return one_line(str(exc)).removeprefix(f"{self.where}: ")

    def _alone(self, exc: ValueError | TypeError) -> ValueError | TypeError:
        """The one problem, as raised when it is the only one: itself where it names the port."""
        if str(exc).startswith(self.where):
            return exc
        kind = type(exc) if type(exc) in (ValueError, TypeError, UserCodeFailed) else None
        kind = kind or (TypeError if isinstance(exc, TypeError) else ValueError)
        alone = kind(f"{self.where}: {one_line(str(exc))}")
        alone.__cause__ = exc
        return alone
