"""Arrays from files and from the API (``crosscheck/_files.py``, ``load_array``, the engine's copies).

A file's header is checked before its data is read; what a backend is handed is always a private,
native-order, C-contiguous copy, so neither a file's layout nor a backend's kept reference can change
what another backend sees.
"""

from __future__ import annotations

import io
import json
import os
import struct
import zipfile
from pathlib import Path
from typing import ClassVar

import hostile
import numpy as np
import pytest
from paths import ROOT

import crosscheck
from crosscheck._cli.main import main
from crosscheck._files import available_memory, format_bytes, load_array, read_array
from crosscheck._workloads.stack.case import Case, make_inputs

SMALL = ["--layers", "3", "--batch", "4", "--dim", "4"]


def _npy_header(shape, descr="<f4", *, pad_to=128) -> bytes:
    """A version 1.0 .npy header declaring ``shape`` (no data follows unless the caller adds it)."""
    text = f"{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape!r}, }}"
    text += " " * (pad_to - 10 - len(text) - 1) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text.encode()


def _npz(path, name, payload: bytes) -> None:
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(f"{name}.npy", payload)


def _err(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


# -- headers first ------------------------------------------------------------------------------------


def test_a_small_file_declaring_more_than_the_machine_holds_is_refused_before_allocating(tmp_path, capsys):
    huge = (10**6, 10**4, 10**4)  # 400 TB of float32, in a 128-byte file
    (tmp_path / "w.npy").write_bytes(_npy_header(huge))
    np.save(tmp_path / "x.npy", np.ones((4, 10**4), np.float32))
    assert main(["run", "--weights", str(tmp_path / "w.npy"), "--x", str(tmp_path / "x.npy")]) == 2
    err = _err(capsys)
    assert "declares a (1000000, 10000, 10000) float32 array (364 TiB)" in err
    assert "holds 0 B of data" in err  # what the file holds is checked first


def test_more_than_the_machine_holds_is_said_so(tmp_path):
    stream = io.BytesIO(_npy_header((10**7, 10**7)))
    with pytest.raises(ValueError, match=r"more than this machine's available memory \(.*\)"):
        read_array(stream, size=10**15, what="this array")  # as if the file held it all


def test_an_oversized_header_is_not_called_pickled(tmp_path):
    (tmp_path / "w.npy").write_bytes(_npy_header((3, 4, 4), pad_to=60_000))
    with pytest.raises(ValueError, match="header over 10000 bytes") as exc:
        load_array(tmp_path / "w.npy", name="weights")
    assert "pickle" not in str(exc.value)


def test_an_npz_declaring_gigabytes_of_the_wrong_rank_is_refused_before_decompressing(tmp_path):
    # 1.9 GB declared, a few bytes held: the rank is checked from the header, nothing is inflated.
    _npz(tmp_path / "w.npz", "weights", _npy_header((475_000_000,)) + bytes(64))
    with pytest.raises(ValueError, match=r"`weights` must have shape \(L, d, d\)"):
        load_array(tmp_path / "w.npz", name="weights", ndim=3)


def test_an_npz_member_holding_less_than_it_declares_is_refused(tmp_path):
    _npz(tmp_path / "w.npz", "weights", _npy_header((1000, 1000, 475)) + bytes(64))
    with pytest.raises(
        ValueError, match=r"declares a \(1000, 1000, 475\) float32 array \(1.77 GiB\) but holds 64 B"
    ):
        load_array(tmp_path / "w.npz", name="weights", ndim=3)


def test_a_directory_is_a_directory(tmp_path, capsys):
    np.save(tmp_path / "x.npy", np.ones((4, 4), np.float32))
    assert main(["run", "--weights", str(tmp_path), "--x", str(tmp_path / "x.npy")]) == 2
    assert f"`--weights` {tmp_path} is a directory, not a file." in _err(capsys)


DAMAGED = {
    "garbage after the signature": b"\x93NUMPY" + b"garbage, not a header at all" * 4,
    "version 9.9": b"\x93NUMPY\x09\x09" + bytes(120),
    "version 3.0, garbage header": b"\x93NUMPY\x03\x00" + struct.pack("<I", 20) + b"{'descr': [[[" + bytes(7),
    "version 1.0, garbage header": b"\x93NUMPY\x01\x00" + struct.pack("<H", 16) + b"not a dict at all",
    "signature only": b"\x93NUMPY",
}


@pytest.mark.parametrize("payload", list(DAMAGED.values()), ids=list(DAMAGED))
def test_a_damaged_header_is_one_line_without_private_numpy_api(tmp_path, capsys, payload):
    # NumPy 2.4 removed `numpy.lib.format._read_array_header`: reading it was a traceback.
    (tmp_path / "w.npy").write_bytes(payload)
    np.save(tmp_path / "x.npy", np.ones((4, 4), np.float32))
    assert main(["run", "--weights", str(tmp_path / "w.npy"), "--x", str(tmp_path / "x.npy")]) == 2
    err = _err(capsys)
    assert err.startswith(f"crosscheck: error: `--weights` {tmp_path / 'w.npy'} "), err
    assert any(k in err for k in ("damaged", "truncated", "signature")), err


def test_a_version_3_file_is_read_with_public_api(tmp_path):
    weights = np.arange(48, dtype=np.float32).reshape(3, 4, 4)
    with open(tmp_path / "w.npy", "wb") as file:
        np.lib.format.write_array(file, weights, version=(3, 0))
    np.testing.assert_array_equal(load_array(tmp_path / "w.npy", name="weights", ndim=3), weights)


def test_the_package_names_no_private_numpy_api():
    root = Path(crosscheck.__file__).parent
    private = ("_read_array_header", "np.core", "numpy.core", "numpy._core", "np._core")
    found = [
        f"{path.name}: {name}" for path in root.rglob("*.py") for name in private if name in path.read_text()
    ]
    assert not found


def test_available_memory_is_a_positive_number_of_bytes():
    assert 2**20 < available_memory() < 2**62


# -- layouts and copies ---------------------------------------------------------------------------------


def _case():
    return make_inputs(Case(layers=3, batch=4, dim=4, seed=1))


@pytest.mark.parametrize(
    "layout",
    ["big-endian", "negative-stride", "fortran"],
)
def test_any_layout_from_the_api_passes_every_backend(layout):
    weights, x = _case()
    if layout == "big-endian":
        weights, x = weights.astype(">f4"), x.astype(">f4")
    elif layout == "negative-stride":
        weights, x = weights[::-1].copy()[::-1], x[::-1].copy()[::-1]
    else:
        weights, x = np.asfortranarray(weights), np.asfortranarray(x)
    report = crosscheck.run(weights=weights, x=x, backends=["jax", "torch"])
    assert report.passed, report.problems


def test_a_big_endian_file_passes_every_backend(tmp_path, capsys):
    weights, x = _case()
    np.save(tmp_path / "w.npy", weights.astype(">f4"))
    np.save(tmp_path / "x.npy", np.asfortranarray(x.astype(">f4")))
    argv = ["run", "--weights", str(tmp_path / "w.npy"), "--x", str(tmp_path / "x.npy")]
    assert main([*argv, "--backend", "jax", "--backend", "torch", "--quiet"]) == 0, capsys.readouterr()


class Keeper:
    """Keeps the arrays it is given; a later backend writes into them."""

    name = "keeper"
    kept: ClassVar[list] = []

    def grad(self, weights, x):
        Keeper.kept = [weights, x]
        return hostile.stack_grad(weights, x).astype(weights.dtype)


class LateWriter:
    """Writes into what the keeper kept (as a thread the keeper left running would), then answers."""

    name = "late-writer"

    def grad(self, weights, x):
        for array in Keeper.kept:
            array[...] = 7.0
        return hostile.stack_grad(weights, x).astype(weights.dtype)


def test_a_backend_that_keeps_its_arrays_and_writes_later_changes_nothing_anyone_sees():
    weights, x = _case()
    mine = weights.copy()
    witness = hostile.make("stack", "witness")
    seen = []
    original = witness.grad

    def grad(w, xx):
        seen.append((w.copy(), xx.copy()))
        return original(w, xx)

    witness.grad = grad
    report = crosscheck.run(weights=weights, x=x, backends=[Keeper(), LateWriter(), witness], repeat=1)
    assert report.passed, report.problems  # the late writer is not blamed: it wrote to a dead copy
    assert np.array_equal(seen[0][0], weights) and np.array_equal(seen[0][1], x)
    assert np.array_equal(weights, mine), "the caller's array was changed"
    assert all(a is not weights for a in Keeper.kept)


def test_a_string_for_backends_is_not_read_as_a_list_of_names():
    with pytest.raises(TypeError, match="`backends` must be a list of backends, found str 'jax'"):
        crosscheck.run(layers=2, batch=2, dim=2, backends="jax")


# -- outputs ------------------------------------------------------------------------------------------


@pytest.fixture
def inputs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    weights, x = _case()
    np.save("w.npy", weights)
    np.save("x.npy", x)
    (tmp_path / "folder").mkdir()
    return ["run", "--weights", "w.npy", "--x", "x.npy", "--backend", "torch", "--quiet"]


OUTPUTS = {
    "json-input": (["--json", "w.npy"], "cannot write `--json` w.npy: it is the input of `--weights`"),
    "junit-input": (["--junit", "x.npy"], "cannot write `--junit` x.npy: it is the input of `--x`"),
    "bundle-input": (["--save-bundle", "./w.npy"], "it is the input of `--weights`"),
    "json-folder": (["--json", "folder"], "cannot write `--json` folder: it is a directory"),
    "plot-folder": (["--plot", "folder"], "cannot write `--plot` folder: it is a directory"),
    "plot-extension": (["--plot", "out.bmp"], "cannot write `--plot` out.bmp: its extension is .bmp"),
    "plot-none": (["--plot", "out"], "cannot write `--plot` out: it has no extension"),
    "same-file": (["--json", "r.out", "--junit", "r.out"], "`--json` and `--junit` name the same file"),
}


@pytest.mark.parametrize("kind", list(OUTPUTS), ids=list(OUTPUTS))
def test_an_output_that_cannot_be_written_is_refused_before_the_run(inputs, capsys, kind, monkeypatch):
    pytest.importorskip("matplotlib")
    argv, phrase = OUTPUTS[kind]
    ran = []
    monkeypatch.setattr("crosscheck._engine.execute.drive", ran.append)
    before = {name: Path(name).read_bytes() for name in ("w.npy", "x.npy")}
    assert main([*inputs, *argv]) == 2
    assert phrase in _err(capsys)
    assert not ran, "the run started"
    assert all(Path(name).read_bytes() == data for name, data in before.items()), "an input was overwritten"
    assert not [p.name for p in Path().iterdir() if p.name.startswith(("out", "folder.", "r.out"))]


SPECIAL = {
    "loop": (lambda: os.symlink("loop", "loop"), "cannot write `--json` loop: it is a symbolic link loop."),
    "fifo": (lambda: os.mkfifo("loop"), "cannot write `--json` loop: it is a FIFO nobody reads"),
}


@pytest.mark.parametrize("kind", list(SPECIAL), ids=list(SPECIAL))
def test_a_special_output_is_refused_in_one_line(inputs, capsys, kind, monkeypatch):
    # A FIFO nobody reads made the run wait forever once it was over; a loop was a traceback.
    make, phrase = SPECIAL[kind]
    make()
    ran = []
    monkeypatch.setattr("crosscheck._engine.execute.drive", ran.append)
    assert main([*inputs, "--json", "loop"]) == 2
    assert phrase in _err(capsys)
    assert not ran, "the run started"


def test_a_read_fifo_is_written(inputs, capsys):
    os.mkfifo("fifo")
    reader = os.open("fifo", os.O_RDONLY | os.O_NONBLOCK)  # someone reads it
    try:
        assert main([*inputs, "--json", "fifo"]) == 0
        assert json.loads(os.read(reader, 10**6))["passed"] is True
    finally:
        os.close(reader)


CHDIR_BACKEND = """
import os
from crosscheck import load_backend

def grad(weights, x):
    os.chdir("folder")  # a backend that moves the working directory
    return load_backend("numpy-fd").grad(weights, x)
"""


def test_a_backend_that_changes_directory_does_not_move_the_report(inputs, monkeypatch):
    Path("movebackend.py").write_text(CHDIR_BACKEND)
    monkeypatch.syspath_prepend(str(Path.cwd()))
    here = Path.cwd()
    argv = [*inputs[:5], "--backend", "movebackend:grad", "--no-isolate", "--quiet", "--json", "r.json"]
    main(argv)
    assert (here / "r.json").is_file()
    assert not (here / "folder" / "r.json").exists()


def test_an_output_that_is_a_backends_source_is_refused(inputs, capsys, monkeypatch):
    Path("mybackend.py").write_text("def grad(w, x):\n    return w\n")
    monkeypatch.syspath_prepend(str(Path.cwd()))
    argv = [*inputs, "--backend", "mybackend:grad", "--json", "mybackend.py"]
    assert main(argv) == 2
    assert "cannot write `--json` mybackend.py: it is the source of `mybackend:grad`" in _err(capsys)
    assert Path("mybackend.py").read_text().startswith("def grad")


def test_inspect_goes_through_the_same_rule_as_run(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("mybackend.py").write_text("def grad(w, x):\n    return w\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert main(["inspect", "--backend", "mybackend:grad", "--json", "mybackend.py"]) == 2
    assert "cannot write `--json` mybackend.py: it is the source of `mybackend:grad`" in _err(capsys)
    assert Path("mybackend.py").read_text().startswith("def grad")


def test_a_sweep_output_that_is_its_implicit_configuration_is_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("pyproject.toml").write_text("[tool.crosscheck]\nlayers = [2]\n")
    before = Path("pyproject.toml").read_text()
    assert main(["sweep", "--json", "pyproject.toml"]) == 2
    assert "it is the configuration this sweep reads, which it would overwrite" in _err(capsys)
    assert Path("pyproject.toml").read_text() == before


@pytest.mark.parametrize(
    ("n", "said"),
    [
        (0, "0 B"),
        (1023, "1023 B"),
        (1536, "1.5 KiB"),
        (3 * 2**20, "3 MiB"),
        (2**30, "1 GiB"),
        (3 * 2**40, "3 TiB"),
    ],
    ids=["zero", "bytes", "KiB", "MiB", "GiB", "TiB"],
)
def test_format_bytes_says_each_unit(n, said):
    assert format_bytes(n) == said


def test_one_format_bytes_for_the_engine_and_the_command_line():
    """A byte count reads the same in an error and in a table: one ``format_bytes``, in ``_files``, which
    the command's tables (``memory``, ``inspect``) use too (a second copy there stopped at GiB)."""
    from crosscheck._cli import inspect, memory

    homes = sorted(
        p.relative_to(ROOT).as_posix()
        for p in (ROOT / "crosscheck").rglob("*.py")
        if "def format_bytes(" in p.read_text(encoding="utf-8")
    )
    assert homes == ["crosscheck/_files.py"]
    assert memory.format_bytes is inspect.format_bytes is format_bytes
