"""The options several subcommands take, declared once: the case (as the stack declares it), the
matrix, the backends and the tolerance pair, and the checks of what was given.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Mapping
from typing import Any

from crosscheck._backends import declared_settings
from crosscheck._cli.common import UsageError
from crosscheck._compare.constants import DTYPES
from crosscheck._workloads.protocol import Knob
from crosscheck._workloads.registry import case_knobs

#: Every option of a generated stack case, in the order ``--help`` lists them: the stack's knobs and its
#: point's (``--dtype``, ``--seed``), as the stack declares them (``Knob``: help, type, choices, default).
CASE_OPTIONS: dict[str, Knob] = case_knobs("stack")

#: The core's own defaults (the stack's), shown in ``--help`` where an option is left unset.
CASE_DEFAULTS: dict[str, Any] = {name: knob.default for name, knob in CASE_OPTIONS.items()}


def add_case_options(parser: Any, defaults: Mapping[str, Any] | None = None) -> None:
    """Add the case options to ``parser`` (a parser or an argument group).

    Args:
        parser: where the options go.
        defaults: ``None``: every case option, left ``None`` when not given (so that a caller can tell
            what the user gave) while ``--help`` shows the core's default; a mapping: only the options
            it names, in the table's order, with those defaults.
    """
    unknown = set(defaults or ()) - set(CASE_OPTIONS)
    if unknown:  # a programming error, not the user's
        raise ValueError(f"not case options: {', '.join(sorted(unknown))}")
    names = CASE_OPTIONS if defaults is None else [name for name in CASE_OPTIONS if name in defaults]
    for name in names:
        option = CASE_OPTIONS[name]
        shown = CASE_DEFAULTS[name] if defaults is None else defaults[name]
        parser.add_argument(
            f"--{name}",
            type=option.type,
            choices=option.choices,
            default=None if defaults is None else defaults[name],
            help=f"{option.help} (default {shown})",
        )


def add_matrix_options(parser: Any, names: Iterable[str]) -> None:
    """Add case options that each take a list (repeat the option): the sweep's matrix."""
    for name in names:
        option = CASE_OPTIONS[name]
        parser.add_argument(
            f"--{name}",
            action="append",
            type=option.type,
            # A sweep judges float32 and float64; a 16-bit case is one `crosscheck run` at a time.
            choices=DTYPES if name == "dtype" else option.choices,
            metavar="N" if option.type is int else None,
            help=f"{option.help} (repeatable)",
        )


def case_options_given(args: argparse.Namespace) -> dict[str, Any]:
    """The case options the user gave (those left ``None`` by ``add_case_options(parser)`` omitted)."""
    return {name: getattr(args, name) for name in CASE_OPTIONS if getattr(args, name, None) is not None}


# -- other options that several subcommands take ---------------------------------------------------


def add_backend_option(parser: Any, help: str) -> None:
    """``--backend NAME_OR_IMPORT_STRING``, repeatable."""
    parser.add_argument("--backend", action="append", metavar="NAME_OR_IMPORT_STRING", help=help)


def add_tolerance_options(parser: Any) -> None:
    """``--rtol`` and ``--atol``: the user's slack, given together (``check_tolerances``)."""
    parser.add_argument("--rtol", type=float, help="user slack: relative (needs --atol)")
    parser.add_argument("--atol", type=float, help="user slack: absolute (needs --rtol)")


def check_tolerances(args: argparse.Namespace) -> None:
    """``--rtol`` and ``--atol`` come together or not at all (torch's ``get_tolerances`` says why): the
    rule of ``crosscheck.Slack``, spelled as options."""
    from crosscheck._records import check_pair

    try:
        check_pair(args.rtol, args.atol, front="cli")
    except ValueError as exc:
        raise UsageError(str(exc)) from exc


def add_placement_options(parser: Any) -> None:
    """Each framework's placement settings, as its folder declares them (``Framework.placement``):
    ``--jax-platform`` and ``--jax-precision``, where the JAX side runs and its matmul precision
    (``crosscheck.Execution``; checked by ``placement_options``, with the API's words)."""
    for name, setting in declared_settings():
        parser.add_argument(
            "--" + name.replace("_", "-"), metavar="{" + ",".join(setting.choices) + "}", help=setting.help
        )


def placement_options(args: argparse.Namespace) -> dict[str, str]:
    """The placement options as ``Execution``'s keywords (``jax_platform``; each setting's default where
    not given), refused as the API refuses them, spelled as options."""
    from crosscheck._records import check_placement

    given = {name: getattr(args, name, None) or setting.default for name, setting in declared_settings()}
    try:
        check_placement(given, front="cli")
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    return given


def check_at_least(option: str, values: Any, *, least: int = 1, expected: str | None = None) -> None:
    """``option``'s value (or each of its values) is at least ``least``; ``expected`` words the bound."""
    for value in values if isinstance(values, (list, tuple)) else [values]:
        if value < least:
            raise UsageError(f"`{option}` must be {expected or f'at least {least}'}, found {value}.")
