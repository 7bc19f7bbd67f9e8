"""Arrays from files someone sent, read safely, and what this machine can hold.

``.npy`` data is read in two steps: its header first (the shape and dtype it declares), checked against
what the file holds, what the caller expects and the memory this machine has, and only then the data.
So a 192-byte file that declares a terabyte, or a zip member that would decompress to more than fits,
is one line (a ``ValueError``) before anything is allocated. Nothing is ever unpickled.

At the bottom of the layers, beside ``_errors`` (it needs only the dtypes of ``_compare.constants``): the
CLI's ``--weights/--x`` (``load_array``), repro bundles and the memory estimates all use it.
"""

from __future__ import annotations

import io
import math
import os
import zipfile
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import numpy as np

from crosscheck._compare.constants import DTYPES

#: The longest .npy header read: NumPy's own default limit (a plain array's header is ~128 bytes).
MAX_HEADER = 10_000

Expect = Callable[[tuple[int, ...], np.dtype], None]


def format_bytes(n: float) -> str:
    """``1.5 GiB``: a byte count at a readable unit."""
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n:.0f} B"


def available_memory() -> int:
    """Bytes this process can still allocate without swapping: ``MemAvailable`` (Linux), else the
    physical memory."""
    try:
        with open("/proc/meminfo") as file:
            for line in file:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (AttributeError, OSError, ValueError):
        return 2**63  # unknown: refuse nothing on this ground


def check_readable(path: str | Path, what: str) -> Path:
    """``path`` as a ``Path`` when it is a readable file; else a one-line ``ValueError`` saying what it
    is (missing, a directory, something else)."""
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{what} {path} is a directory, not a file.")
    if not path.exists():
        raise ValueError(f"{what} file not found: {path}")
    if not path.is_file():
        raise ValueError(f"{what} {path} is not a regular file.")
    return path


def read_array(stream: IO[bytes], *, size: int, what: str, expect: Expect | None = None) -> np.ndarray:
    """Read one ``.npy`` array from ``stream``, which holds ``size`` bytes from its current position.

    Args:
        what: how messages name it (``"`--weights` w.npy"``, ``"bundle b.npz, entry `param_0`"``).
        expect: called with the declared shape and dtype before any data is read; raises
            ``ValueError`` for an array that cannot be what the caller needs.

    Raises:
        ValueError: not a .npy array, an unreadable or oversized header, an object (pickled) array,
            more data declared than the file holds or than this machine can hold, or ``expect``'s.
    """
    start = stream.tell()
    shape, fortran, dtype = read_header(stream, what=what)
    if expect is not None:
        expect(shape, dtype)
    nbytes = math.prod(shape) * dtype.itemsize
    held = size - (stream.tell() - start)
    declared = f"a {_shape(shape)} {dtype.name} array ({format_bytes(nbytes)})"
    if nbytes > held:
        raise ValueError(
            f"{what} declares {declared} but holds {format_bytes(max(held, 0))} of data (a truncated or "
            "damaged file)."
        )
    available = available_memory()
    if nbytes > available:
        raise ValueError(
            f"{what} declares {declared}, more than this machine's available memory "
            f"({format_bytes(available)})."
        )
    data = np.frombuffer(_read_exactly(stream, nbytes, what), dtype=dtype, count=math.prod(shape))
    shaped = data.reshape(shape, order="F") if fortran else data.reshape(shape)
    return shaped.copy(order="C")  # writable, ours


def read_header(stream: IO[bytes], *, what: str) -> tuple[tuple[int, ...], bool, np.dtype]:
    """``(shape, fortran_order, dtype)`` of the ``.npy`` header at the stream's position."""
    fmt = np.lib.format
    try:
        version = fmt.read_magic(stream)
    except (ValueError, EOFError) as exc:
        raise ValueError(f"{what} is not a .npy array: it does not start with the .npy signature.") from exc
    # Public readers only (the private reader NumPy 2.4 removed was a traceback). Version 3.0 differs
    # from 2.0 only in a utf-8 header, which for the plain float arrays crosscheck reads is ASCII.
    readers = {(1, 0): fmt.read_array_header_1_0, (2, 0): fmt.read_array_header_2_0}
    readers[(3, 0)] = fmt.read_array_header_2_0
    if version not in readers:
        raise ValueError(
            f"{what} has .npy format version {version[0]}.{version[1]}; expected 1.0, 2.0 or 3.0 "
            "(a damaged file)."
        )
    try:
        shape, fortran, dtype = readers[version](stream, max_header_size=MAX_HEADER)
    except ValueError as exc:
        if "large" in str(exc):
            raise ValueError(
                f"{what} has a .npy header over {MAX_HEADER} bytes, far more than a plain array's "
                "(a damaged or crafted file)."
            ) from exc
        raise ValueError(f"{what} has an unreadable .npy header (a damaged file).") from exc
    except EOFError as exc:
        raise ValueError(f"{what} ends inside its .npy header (a truncated file).") from exc
    except Exception as exc:  # garbage reaches NumPy's parser: SyntaxError, tokenize.TokenError, ...
        raise ValueError(f"{what} has an unreadable .npy header (a damaged file).") from exc
    if dtype.hasobject:
        raise ValueError(f"{what} holds pickled objects (an object array), which crosscheck never loads.")
    if any(not isinstance(n, int) or n < 0 for n in shape):
        raise ValueError(f"{what} declares an impossible shape {shape!r:.60}.")
    return tuple(shape), bool(fortran), dtype


def _read_exactly(stream: IO[bytes], nbytes: int, what: str) -> bytes:
    data = stream.read(nbytes)
    if len(data) != nbytes:
        raise ValueError(f"{what} ends before its data does (a truncated file).")
    return data


def _shape(shape: tuple[int, ...]) -> str:
    return "(" + ", ".join(str(n) for n in shape) + ("," if len(shape) == 1 else "") + ")"


def read_member(
    archive: zipfile.ZipFile, name: str, *, what: str, expect: Expect | None = None
) -> np.ndarray:
    """The array ``name`` of an ``.npz`` archive, checked by its header before it is decompressed
    (its declared size against the member's and this machine's memory)."""
    try:
        info = archive.getinfo(f"{name}.npy")
    except KeyError as exc:
        raise ValueError(f"{what} is missing from the archive.") from exc
    with archive.open(info) as stream:
        return read_array(stream, size=info.file_size, what=what, expect=expect)


def member_names(archive: zipfile.ZipFile) -> list[str]:
    """The arrays an ``.npz`` archive holds (its ``.npy`` members, without the suffix)."""
    return [n.removesuffix(".npy") for n in archive.namelist() if n.endswith(".npy")]


def open_file(path: Path, what: str) -> io.BufferedReader:
    """``path`` opened for reading, or a one-line ``ValueError`` saying why it cannot be."""
    try:
        return path.open("rb")
    except OSError as exc:
        raise ValueError(f"{what} {path} cannot be read ({exc.strerror or exc}).") from exc


# -- a user's array file (`crosscheck run --weights/--x`) ----------------------------------------


def load_array(path: str | Path, *, name: str, ndim: int | None = None) -> np.ndarray:
    """Load a ``.npy`` file, or the single array of a ``.npz`` file, without pickle.

    The header is read first: a shape of another rank than ``ndim``, or more data declared than the
    file holds or than this machine can hold, is refused before anything is allocated or decompressed.

    Raises:
        ValueError: missing, a directory, unreadable, pickled, oversized, of the wrong rank, or a
            multi-array file (one line, naming the option and the file).
    """
    what = f"`--{name}`"
    path = check_readable(path, what)
    expect = None if ndim is None else _rank(name, path, ndim)
    with open_file(path, what) as file:  # our own handle, closed whatever happens
        head = file.read(6)
        file.seek(0)
        if head.startswith(b"\x93NUMPY"):
            return read_array(file, size=path.stat().st_size, what=f"{what} {path}", expect=expect)
        if head.startswith(b"PK"):
            return _load_npz(file, path, name, expect)
        if not head:
            raise ValueError(f"{what} {path} is empty: not a valid .npy/.npz file.")
        if head.startswith(b"\x80"):  # a pickle stream (protocol 2 and later)
            raise ValueError(_pickled_message(path, name))
        raise ValueError(
            f"{what} {path} is not a .npy/.npz file: it starts with neither the .npy signature nor a "
            "zip header."
        )


def _load_npz(file: Any, path: Path, name: str, expect: Any) -> np.ndarray:
    what = f"`--{name}` {path}"
    try:
        with zipfile.ZipFile(file) as archive:
            keys = member_names(archive)
            if name in keys:
                keys = [name]
            if len(keys) != 1:
                raise ValueError(
                    f"{what} must hold one array (or one named {name!r}); "
                    f"found {len(keys)}: {', '.join(keys) or 'none'}."
                )
            return read_member(archive, keys[0], what=f"{what}, array `{keys[0]}`", expect=expect)
    except _UNREADABLE as exc:
        raise ValueError(f"{what} is not a valid .npy/.npz file ({type(exc).__name__}: {exc}).") from exc


def _rank(name: str, path: Path, ndim: int) -> Callable[[tuple[int, ...], np.dtype], None]:
    """A header check: the declared shape has ``ndim`` axes and a float dtype crosscheck judges."""
    wanted = {3: "(L, d, d)", 2: "(N, d)"}.get(ndim, f"{ndim} axes")

    def expect(shape: tuple[int, ...], dtype: np.dtype) -> None:
        if len(shape) != ndim:
            raise ValueError(f"`{name}` must have shape {wanted}; `--{name}` {path} holds shape {shape}.")
        if dtype.name not in DTYPES:  # a big-endian float32 is float32 here (made native later)
            raise ValueError(
                f"`{name}` must be float32 or float64; `--{name}` {path} holds {dtype.name}. "
                f"Convert it with `.astype('float32')`."
            )

    return expect


#: What a damaged archive raises (its members are read lazily: zlib and CRC errors come late).
_UNREADABLE = (OSError, EOFError, zipfile.BadZipFile, zlib.error)


def _pickled_message(path: Path, name: str) -> str:
    return (
        f"`--{name}` {path} holds pickled objects, which crosscheck never loads; "
        f"save a plain float array with numpy.save."
    )
