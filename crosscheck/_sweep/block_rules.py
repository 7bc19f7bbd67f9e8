"""What a blockwise check (``blocks.check_blocks``, ``crosscheck blocks``) refuses before anything runs,
each in one line: its options, a check that would not compare the port with the original, a folder
for the recordings that is none."""

from __future__ import annotations

import os

from crosscheck._backends import ORACLE
from crosscheck._records import check_timeout


def check_options(
    spec: str | None,
    backends: list[str] | None,
    reference: str,
    dtype: str,
    scheduler: str | None,
    directory: str | None,
    timeout: float | None,
) -> None:
    """``check_blocks``'s options, refused in one line before anything runs."""
    if dtype not in ("float32", "float64"):
        raise ValueError(f"`dtype` of a blockwise check must be float32 or float64, found {dtype!r}.")
    if scheduler is not None:
        from crosscheck._sweep.engine import check_scheduler

        check_scheduler(scheduler)
        if spec is None:
            raise ValueError(
                "with `scheduler`, give the Blocks as an import string `module:attribute`: each worker "
                "loads it by name and builds only its block."
            )
    if backends is not None and not all(isinstance(b, str) for b in backends):
        raise TypeError("`backends` of a blockwise check must be names or import strings.")
    check_sides(backends, reference)
    check_directory(directory)
    check_timeout(timeout)


def check_sides(backends: list[str] | None, reference: str, *, front: str = "api") -> None:
    """The check compares each ported block with its PyTorch block: the port (``jax``) runs, and the
    original (``torch``) is a backend or the reference, or the reference is the oracle (which the port
    judge gives PyTorch's module outputs too). Otherwise it would judge nothing of the port (``front``:
    how the options are spelled in the message).

    Raises:
        ValueError: it would not compare the port with the original (one line, naming the options).
    """
    from crosscheck._records import spell

    given = list(backends) if backends is not None else ["jax", "torch"]
    sides = {*given, reference}
    if "jax" in sides and ("torch" in sides or reference == ORACLE):
        return
    what = "never runs the port, `jax`" if "jax" not in sides else "compares `jax` with itself"
    asked = (
        " ".join(spell("backend", b, front=front) for b in given)
        if front == "cli"
        else spell("backends", given, front=front)
    )
    raise ValueError(
        f"`{asked}` with `{spell('reference', reference, front=front)}` {what}: a blockwise check compares "
        "each ported block (`jax`) with its PyTorch block (`torch`); check both (the default backends), or "
        "one with the other as the reference."
    )


def check_directory(directory: str | None, option: str = "directory") -> None:
    """``directory`` (``option``, as the user spelled it) is an existing folder this process can write in.

    Raises:
        ValueError: it is missing, not a folder, or not writable (one line).
    """
    if directory is None:
        return
    if not os.path.exists(directory):
        raise ValueError(
            f"`{option}` {directory}: no such folder; give an existing folder for the blocks' recordings."
        )
    if not os.path.isdir(directory):
        raise ValueError(
            f"`{option}` {directory}: it is a file, not a folder; give a folder for the blocks' recordings."
        )
    if not os.access(directory, os.W_OK | os.X_OK):
        raise ValueError(f"`{option}` {directory}: this process cannot write in it.")
