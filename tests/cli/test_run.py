"""The command line: exit statuses, the table, the JSON report, usage errors, users' arrays and backends."""

from __future__ import annotations

import hashlib
import importlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import crosscheck
from crosscheck._cli.main import main

SMALL = ["--layers", "3", "--dim", "4", "--batch", "3"]

#: A user's module: a correct gradient written by hand with NumPy, planted bugs and other backend shapes.
USER_MODULE = '''
import numpy as np


def my_grad(weights, x):
    """d sum(y_L ** 2) / d weights: forward keeping the activations, then backward."""
    ys = [x]
    for w in weights:
        ys.append(np.maximum(ys[-1] @ w, 0))
    g = 2 * ys[-1]
    out = np.empty_like(weights)
    for k in reversed(range(len(weights))):
        g = g * (ys[k + 1] > 0)
        out[k] = ys[k].T @ g
        g = g @ weights[k].T
    return out


def no_last_relu(weights, x):
    ys = [x]
    for k, w in enumerate(weights):
        z = ys[-1] @ w
        ys.append(z if k == len(weights) - 1 else np.maximum(z, 0))
    g = 2 * ys[-1]
    out = np.empty_like(weights)
    for k in reversed(range(len(weights))):
        if k < len(weights) - 1:
            g = g * (ys[k + 1] > 0)
        out[k] = ys[k].T @ g
        g = g @ weights[k].T
    return out


def mean_loss(weights, x):
    return my_grad(weights, x) / np.asarray(x.shape[0] * x.shape[1], dtype=x.dtype)


def raises(weights, x):
    raise RuntimeError("boom from the user's backend")


def returns_nan(weights, x):
    out = my_grad(weights, x)
    out[1, 2, 3] = np.nan
    return out


def wrong_shape(weights, x):
    return my_grad(weights, x)[:-1]


def wrong_dtype(weights, x):
    return my_grad(weights, x).astype(np.float64)


class GradObject:
    def grad(self, weights, x):
        return my_grad(weights, x)


class NamedBackend:
    name = "named-backend"

    def grad(self, weights, x):
        return my_grad(weights, x)


def make_backend():
    return NamedBackend()


def factory_raises():
    raise RuntimeError("cannot start")


def raises_with_brackets(weights, x):
    raise RuntimeError("needs pip install 'mylib[gpu]'")


obj = GradObject()
not_a_backend = 3.0
'''


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    """Write ``mymodule.py`` into ``tmp_path``, make it the working directory, undo every import effect."""
    (tmp_path / "mymodule.py").write_text(USER_MODULE)
    monkeypatch.chdir(tmp_path)
    # crosscheck puts the working directory on sys.path (like ``python -m``): give it a copy to change.
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setitem(sys.modules, "mymodule", None)
    del sys.modules["mymodule"]  # monkeypatch removes the module again when the test ends
    importlib.invalidate_caches()
    return tmp_path


def _console_script() -> Path:
    script = Path(sys.executable).parent / ("crosscheck.exe" if os.name == "nt" else "crosscheck")
    if not script.is_file():
        pytest.skip(f"the `crosscheck` console script is not installed next to {sys.executable}")
    return script


def _subprocess(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=300, check=False)


# -- exit 0, the table, the JSON report ---------------------------------------------------------------


def test_small_case_passes_and_prints_the_table(capsys):
    status = main(["run", "--layers", "2", "--dim", "3", "--batch", "2", "--seed", "1"])
    out = capsys.readouterr().out
    assert status == 0, out
    for text in ("backend", "max abs", "worst", "decided", "PASSED"):
        assert text in out
    rows = {line.split()[1]: line for line in out.splitlines() if line.startswith("│")}
    assert "reference" in rows["numpy-fd"]
    for name in ("jax", "torch"):  # ok, or unavailable where the framework is not installed
        assert " ok " in rows[name] or " unavailable " in rows[name]


@pytest.mark.parametrize(
    ("backend", "expected_status", "expected_line"),
    [("mymodule:my_grad", 0, "PASSED"), ("mymodule:mean_loss", 1, "FAILED: `mean_loss` disagrees")],
    ids=["passes", "fails"],
)
def test_quiet_prints_only_the_verdict(user_module, capsys, backend, expected_status, expected_line):
    status = main(["run", *SMALL, "--backend", backend, "--quiet"])
    out = capsys.readouterr().out
    assert status == expected_status
    assert out.strip().splitlines() == [out.strip()]
    assert out.startswith(expected_line)


def test_quiet_keeps_the_verdicts_caveat_said_once_for_every_candidate(capsys):
    # A bfloat16 pass says what bfloat16 cannot see; --quiet printed "PASSED" alone, the caveat lost.
    pytest.importorskip("jax")
    pytest.importorskip("torch")
    status = main(["run", *SMALL, "--dtype", "bfloat16", "--backend", "jax", "--backend", "torch", "--quiet"])
    out = capsys.readouterr().out
    assert status == 0, out
    assert out.splitlines() == [
        "PASSED; 74 entries unjudgeable (74 bfloat16 rounding may flip several ReLUs)",  # as the table says
        "caveat of `jax`, `torch`: a bug that moves entries by less is not seen in bfloat16: check in "
        "float32 too (--dtype float32)",
    ]


#: A screened run of the stack: 3 layers of 16 x 16, the 8 largest entries of each judged one by one.
SCREENED = ["--layers", "3", "--dim", "16", "--batch", "4", "--backend", "planted:correct", "--no-isolate"]
#: What its PASSED line says it did not judge entry by entry.
NOT_JUDGED = (
    "(screened: 24 of 768 entries judged one by one, the others only along 4 random directions per layer)"
)


@pytest.mark.parametrize("how", ["asked", "auto"])
def test_a_screened_pass_says_what_it_did_not_judge_entry_by_entry_also_quiet(capsys, monkeypatch, how):
    from crosscheck._workloads.stack.judge import cost

    if how == "auto":  # where every entry would cost more than both budgets
        monkeypatch.setattr(cost, "SCREEN_FLOPS", 1.0)
        monkeypatch.setattr(cost, "OUTPUTS_FLOPS", 1.0)
    asked = ["--oracle-mode", "screen"] if how == "asked" else []
    assert main(["run", *SCREENED, *asked]) == 0
    out = capsys.readouterr().out
    line = " ".join(out[out.index("PASSED") :].split())  # the terminal's width wraps it
    assert line == f"PASSED: 1 candidate(s) agree with `numpy-fd` {NOT_JUDGED}"
    assert main(["run", *SCREENED, *asked, "--quiet"]) == 0
    assert capsys.readouterr().out == f"PASSED {NOT_JUDGED}\n"


def test_a_pass_that_judged_every_entry_says_nothing_more(capsys):
    for mode in ("full", "outputs"):
        assert main(["run", *SCREENED, "--oracle-mode", mode, "--quiet"]) == 0
        assert capsys.readouterr().out == "PASSED\n"


def test_a_quiet_pass_says_its_unjudgeable_entries_as_the_passed_line_does(capsys):
    # float32 rounding may flip several ReLUs of this case: entries a candidate without activations
    # cannot be judged at; --quiet said "PASSED" alone.
    args = ["run", "--layers", "8", "--batch", "4", "--dim", "6", "--init", "nearzero"]
    args += ["--backend", "planted:correct", "--no-isolate"]
    assert main([*args, "--quiet"]) == 0
    said = "; 183 entries unjudgeable (183 float32 rounding may flip several ReLUs)"
    assert capsys.readouterr().out == f"PASSED{said}\n"
    assert main(args) == 0
    out = capsys.readouterr().out
    assert (
        " ".join(out[out.index("PASSED") :].split()) == f"PASSED: 1 candidate(s) agree with `numpy-fd`{said}"
    )


def test_the_ninth_largest_entry_off_by_2e_4_fails_at_d_256(capsys):
    # The screen passed it (below its layer's directions, not among the 8 largest it spot-checks);
    # "auto" now differences the layers' outputs there and judges every entry.
    status = main(
        ["run", "--dim", "256", "--batch", "8", "--backend", "planted:ninth_off_by_2e_4", "--quiet"]
    )
    out = capsys.readouterr().out
    assert status == 1, out
    assert out.startswith("FAILED: `off_by_0.0002_at_ninth_largest` disagrees with `numpy-fd`"), out


#: A user's workload whose module, loss and gradient each warn, as frameworks do while a model is built.
NOISY = """
import warnings

import numpy as np

import crosscheck

warnings.warn("noisy: imported", UserWarning)


def _loss(p, i):
    warnings.warn("noisy: loss called", UserWarning)
    return float(np.sum((i["x"] @ p["w"]) ** 2))


def grad(p, i):
    warnings.warn("noisy: grad called", UserWarning)
    return {"w": 2 * i["x"].T @ (i["x"] @ p["w"])}


lin = crosscheck.Workload(name="lin", parameters={"w": (3, 2)}, inputs={"x": (4, 3)}, reference=_loss)
"""


#: The caveat of a workload's float32 pass, under --quiet's verdict line.
FLOAT32_CAVEAT = (
    "a bug that moves the gradients by less is not seen in float32: check in float64 too (--dtype float64)"
)


def test_quiet_drops_other_libraries_warnings_also_from_the_worker_process(tmp_path):
    (tmp_path / "noisy.py").write_text(NOISY)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(Path(crosscheck.__file__).parents[1]), str(tmp_path)]),
    }
    argv = [sys.executable, "-m", "crosscheck", "run", "--workload", "noisy:lin", "--backend", "noisy:grad"]
    loud = subprocess.run(
        argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert loud.returncode == 0, loud.stdout + loud.stderr
    assert "noisy: imported" in loud.stderr  # the warnings do reach the terminal without --quiet
    quiet = subprocess.run(
        [*argv, "--quiet"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert quiet.returncode == 0, quiet.stdout + quiet.stderr
    # the verdict, then the caveat of a float32 pass (what --quiet keeps), and no warning
    assert quiet.stdout == f"PASSED\ncaveat of `grad`: {FLOAT32_CAVEAT}\n"
    assert "noisy" not in quiet.stderr, quiet.stderr


def test_json_report_has_the_contract_keys(tmp_path, capsys):
    path = tmp_path / "report.json"
    status = main(["run", "--layers", "2", "--dim", "3", "--batch", "2", "--seed", "1", "--json", str(path)])
    capsys.readouterr()
    assert status == 0
    report = json.loads(path.read_text())
    assert report["passed"] is True
    case = crosscheck.Case(**report["case"])  # everything needed to rebuild the inputs
    assert case == crosscheck.Case(layers=2, dim=3, batch=2, seed=1)
    assert report["backends"]["numpy-fd"]["status"] == "ok"
    for name, backend in report["backends"].items():
        assert {"status", "dtype", "device", "seconds", "error"} <= backend.keys(), name
    ran = [name for name, b in report["backends"].items() if b["status"] == "ok" and name != "numpy-fd"]
    assert sorted(c["backend"] for c in report["comparisons"]) == sorted(ran)
    for comparison in report["comparisons"]:
        assert comparison["reference"] == "numpy-fd"
        assert comparison["passed"] is True
        assert comparison["mismatched"] == 0
        assert comparison["total"] == 2 * 3 * 3
        for key in ("max_abs_diff", "max_rel_diff"):
            assert isinstance(comparison[key], float)
            assert len(comparison[f"{key}_index"]) == 3
        assert set(comparison["worst_terms"]) <= set(comparison["tolerance_sources"])
        assert comparison["decided_by"] in comparison["worst_terms"]
        assert comparison["unjudgeable"] == 0
        assert comparison["unjudgeable_reasons"] == {}


def test_json_report_of_a_failed_run(user_module, capsys):
    path = user_module / "report.json"
    status = main(["run", *SMALL, "--backend", "mymodule:raises", "--json", str(path)])
    capsys.readouterr()
    report = json.loads(path.read_text())
    assert status == 1
    assert report["passed"] is False
    assert report["backends"]["raises"]["status"] == "failed"
    assert "boom from the user's backend" in report["backends"]["raises"]["error"]


# -- usage errors: exit 2, one line, no traceback ------------------------------------------------------


def _write_inputs(folder: Path) -> None:
    weights, x = crosscheck.make_inputs(crosscheck.Case(layers=2, dim=3, batch=2, seed=1))
    np.save(folder / "w.npy", weights)
    np.save(folder / "x.npy", x)
    np.save(folder / "w_not_square.npy", np.ones((2, 3, 4), np.float32))
    np.save(folder / "x_width_4.npy", np.ones((2, 4), np.float32))
    np.save(folder / "w_int.npy", np.ones((2, 3, 3), np.int64))
    w_nan = weights.copy()
    w_nan[0, 1, 2] = np.nan
    np.save(folder / "w_nan.npy", w_nan)
    x_inf = x.copy()
    x_inf[1, 0] = np.inf
    np.save(folder / "x_inf.npy", x_inf)
    np.save(folder / "w_object.npy", np.array([{"a": 1}, None], dtype=object), allow_pickle=True)
    (folder / "corrupt.npy").write_bytes(b"\x00" + np.random.default_rng(0).bytes(255))
    np.savez(folder / "two.npz", a=weights, b=weights)


USAGE_ERRORS = [
    # (argv, fragments the one line must contain)
    (["run", "--backend", "nope"], ["unknown backend", "`nope`", "jax", "torch", "numpy-fd"]),
    (["run", "--dim", "0"], ["`dim`", "at least 1", "found 0"]),
    (["run", "--dtype", "int8"], ["--dtype", "'int8'", "float32", "float64"]),
    (["run", "--layers", "-1"], ["`layers`", "at least 1", "found -1"]),
    (["run", "--layers", "two"], ["--layers", "'two'"]),
    (["run", "--init", "zeros"], ["--init", "'zeros'", "gaussian", "identity", "integer"]),
    (["run", "--rtol", "1e-3"], ["`--rtol` and `--atol`", "together", "found only `--rtol`"]),
    (["run", "--atol", "1e-3"], ["`--rtol` and `--atol`", "together", "found only `--atol`"]),
    (["run", "--rtol", "-1", "--atol", "0"], ["`rtol`", "non-negative", "-1"]),
    (["run", "--weights", "w.npy"], ["`--weights` and `--x`", "together", "found only `--weights`"]),
    (["run", "--x", "x.npy"], ["`--weights` and `--x`", "together", "found only `--x`"]),
    (["run", "--weights", "w.npy", "--x", "x.npy", "--dim", "3"], ["`--dim`", "cannot be combined"]),
    (["run", "--weights", "w_not_square.npy", "--x", "x.npy"], ["`weights`", "(L, d, d)", "(2, 3, 4)"]),
    (["run", "--weights", "w.npy", "--x", "x_width_4.npy"], ["`x`", "(N, 3)", "(2, 4)"]),
    (["run", "--weights", "w_int.npy", "--x", "x.npy"], ["`weights`", "float32 or float64", "int64"]),
    (["run", "--weights", "w_nan.npy", "--x", "x.npy"], ["`weights`", "finite", "1 NaN"]),
    (["run", "--weights", "w.npy", "--x", "x_inf.npy"], ["`x`", "finite", "1 NaN or infinite"]),
    (["run", "--weights", "w_object.npy", "--x", "x.npy"], ["w_object.npy", "pickled"]),
    (["run", "--weights", "corrupt.npy", "--x", "x.npy"], ["corrupt.npy", "not a .npy/.npz file"]),
    (["run", "--weights", "missing.npy", "--x", "x.npy"], ["`--weights`", "not found", "missing.npy"]),
    (["run", "--weights", "w.npy", "--x", "missing.npy"], ["`--x`", "not found", "missing.npy"]),
    (["run", "--weights", "two.npz", "--x", "x.npy"], ["two.npz", "one array", "found 2: a, b"]),
    (["run", "--backend", "nosuchmodule:f"], ["`nosuchmodule:f`", "cannot import", "`nosuchmodule`"]),
    (["run", "--backend", "mymodule:nosuchattr"], ["`mymodule`", "no attribute `nosuchattr`", "my_grad"]),
    (["run", "--backend", "mymodule:"], ["`mymodule:`", "package.module:attribute"]),
    (["run", "--backend", "mymodule:not_a_backend"], ["`mymodule:not_a_backend`", "float", "grad"]),
    (["run", "--reference", "nope"], ["unknown backend", "`nope`"]),
    (["run", "--json", "no/such/folder/r.json", "--backend", "mymodule:my_grad"], ["`--json`", "r.json"]),
    (["frobnicate"], ["'frobnicate'", "run", "sweep"]),
    (["matrix"], ["'matrix'", "run", "sweep"]),  # gone: `crosscheck sweep` runs the CI matrix
    (["sweep", "--backend", "nope"], ["unknown backend", "`nope`"]),
    (["run", "--oracle-mode", "full", "--directions", "8"], ["`--directions`", "`--oracle-mode full`"]),
    (
        ["run", "--quantity", "hvp", "--oracle-mode", "full", "--directions", "8"],
        ["`--directions`", "`--oracle-mode full` never screens"],
    ),
]


@pytest.mark.parametrize(
    ("argv", "fragments"),
    USAGE_ERRORS,
    ids=[
        "unknown-backend",
        "dim-0",
        "dtype-int8",
        "layers-negative",
        "layers-not-int",
        "init-unknown",
        "rtol-alone",
        "atol-alone",
        "rtol-negative",
        "weights-alone",
        "x-alone",
        "weights-and-dim",
        "weights-wrong-shape",
        "x-wrong-width",
        "integer-dtype",
        "nan-weights",
        "inf-x",
        "pickled-object",
        "corrupt-file",
        "missing-weights",
        "missing-x",
        "npz-two-arrays",
        "no-such-module",
        "no-such-attribute",
        "empty-attribute",
        "not-a-backend",
        "unknown-reference",
        "json-unwritable",
        "unknown-command",
        "matrix-is-gone",
        "sweep-unknown-backend",
        "directions-without-screening",
        "directions-with-full-hvp",
    ],
)
def test_usage_error_exits_2_with_one_line(user_module, capsys, argv, fragments):
    _write_inputs(user_module)
    status = main(argv)
    captured = capsys.readouterr()
    assert status == 2
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("crosscheck: error: ")
    for fragment in fragments:
        assert fragment in lines[0]
    assert "Traceback" not in captured.err + captured.out
    assert captured.out == ""


@pytest.mark.parametrize(
    "command",
    [["run", "--dim", "0"], ["run", "--weights", "corrupt.npy", "--x", "x.npy"]],
    ids=["dim-0", "corrupt-file"],
)
def test_usage_error_in_a_real_process(user_module, command):
    _write_inputs(user_module)
    result = _subprocess([sys.executable, "-m", "crosscheck", *command], user_module)
    assert result.returncode == 2
    assert len(result.stderr.splitlines()) == 1, result.stderr
    assert result.stderr.startswith("crosscheck: error: ")
    assert "Traceback" not in result.stderr


# -- the user's own arrays -----------------------------------------------------------------------------


def _save_arrays(folder: Path, kind: str) -> tuple[list[str], np.ndarray, np.ndarray]:
    weights, x = crosscheck.make_inputs(crosscheck.Case(layers=3, dim=4, batch=5, seed=2, dtype="float64"))
    if kind == "npy":
        np.save(folder / "w.npy", weights)
        np.save(folder / "x.npy", x)
        return ["--weights", "w.npy", "--x", "x.npy"], weights, x
    if kind == "npz":
        np.savez(folder / "w.npz", weights)
        np.savez(folder / "x.npz", anything=x)
        return ["--weights", "w.npz", "--x", "x.npz"], weights, x
    np.savez(folder / "both.npz", weights=weights, x=x)  # one file, arrays found by name
    return ["--weights", "both.npz", "--x", "both.npz"], weights, x


@pytest.mark.parametrize("kind", ["npy", "npz", "npz-named"], ids=["npy", "npz", "npz-named"])
def test_user_arrays_pass(user_module, capsys, kind):
    options, weights, x = _save_arrays(user_module, kind)
    status = main(["run", *options, "--backend", "mymodule:my_grad", "--json", "report.json"])
    out = capsys.readouterr().out
    assert status == 0, out
    case = json.loads((user_module / "report.json").read_text())["case"]
    assert (case["layers"], case["batch"], case["dim"], case["dtype"]) == (3, 5, 4, "float64")
    assert case["source"] == "user arrays"
    assert case["weights_sha256"] == hashlib.sha256(weights.tobytes()).hexdigest()
    assert case["x_sha256"] == hashlib.sha256(x.tobytes()).hexdigest()


def test_user_arrays_with_builtin_backends(user_module, capsys):
    options, _, _ = _save_arrays(user_module, "npy")
    status = main(["run", *options])
    out = capsys.readouterr().out
    assert status == 0, out
    assert "PASSED" in out


# -- the user's own backend ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("backend", "expected_status", "expected_text"),
    [
        ("mymodule:my_grad", 0, "PASSED"),
        ("mymodule:no_last_relu", 1, "Mismatched elements: "),
        ("mymodule:mean_loss", 1, "Mismatched elements: "),
    ],
    ids=["correct", "missing-last-relu", "mean-not-sum"],
)
def test_user_backend_through_the_console_script(user_module, backend, expected_status, expected_text):
    result = _subprocess([str(_console_script()), "run", *SMALL, "--backend", backend], user_module)
    assert result.returncode == expected_status, result.stdout + result.stderr
    assert expected_text in result.stdout
    assert "Traceback" not in result.stderr


def test_python_dash_m_is_the_same_program(user_module):
    argv = ["run", *SMALL, "--backend", "mymodule:my_grad", "--json", "report.json"]
    result = _subprocess([sys.executable, "-m", "crosscheck", *argv], user_module)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "PASSED" in result.stdout
    report = json.loads((user_module / "report.json").read_text())
    assert report["passed"] is True
    assert [c["backend"] for c in report["comparisons"]] == ["my_grad"]


@pytest.mark.parametrize(
    ("attribute", "name"),
    [
        ("obj", "mymodule:obj"),
        ("GradObject", "mymodule:GradObject"),
        ("NamedBackend", "named-backend"),
        ("make_backend", "named-backend"),
        ("my_grad", "my_grad"),
    ],
    ids=["object", "class", "named-class", "factory", "function"],
)
def test_user_backend_kinds(user_module, capsys, attribute, name):
    status = main(["run", *SMALL, "--backend", f"mymodule:{attribute}", "--json", "report.json"])
    out = capsys.readouterr().out
    assert status == 0, out
    report = json.loads((user_module / "report.json").read_text())
    assert [c["backend"] for c in report["comparisons"]] == [name]


@pytest.mark.parametrize(
    ("attribute", "texts"),
    [
        ("raises", ["failed", "RuntimeError: boom from the user's backend"]),
        ("returns_nan", ["non-finite", "1 of 48", "(1, 2, 3)"]),
        ("wrong_shape", ["wrong shape", "expected (3, 4, 4)", "found (2, 4, 4)"]),
        ("wrong_dtype", ["wrong dtype", "expected float32", "found float64"]),
    ],
    ids=["raises", "nan", "wrong-shape", "wrong-dtype"],
)
def test_broken_user_backend_exits_1(user_module, capsys, attribute, texts):
    status = main(["run", *SMALL, "--backend", f"mymodule:{attribute}"])
    captured = capsys.readouterr()
    assert status == 1
    assert "FAILED" in captured.out
    for text in texts:
        assert text in captured.out
    assert "Traceback" not in captured.out + captured.err


@pytest.mark.parametrize("quiet", [[], ["--quiet"]], ids=["table", "quiet"])
def test_the_failed_line_keeps_square_brackets(user_module, capsys, quiet):
    # rich reads `[gpu]` as markup and dropped it: the install hint of an unavailable backend lost its extra.
    status = main(["run", *SMALL, "--backend", "mymodule:raises_with_brackets", *quiet])
    out = capsys.readouterr().out
    assert status == 1
    failed = " ".join(out[out.index("FAILED: ") :].split())  # the verdict line, however it wraps
    assert failed.startswith("FAILED: `raises_with_brackets` failed")
    assert "'mylib[gpu]'" in failed


def _modifies_weights(weights, x):
    weights[0, 0, 0] += 1.0
    return np.zeros_like(weights)


def _modifies_x(weights, x):
    x *= 2
    return np.zeros_like(weights)


@pytest.mark.parametrize("backend", [_modifies_weights, _modifies_x], ids=["weights", "x"])
def test_backend_modifying_its_inputs_fails_and_inputs_are_restored(backend):
    weights, x = crosscheck.make_inputs(crosscheck.Case(layers=2, dim=3, batch=4, seed=1))
    weights_copy, x_copy = weights.copy(), x.copy()
    report = crosscheck.run(weights=weights, x=x, backends=[backend])
    assert report.passed is False
    result = report.backends[backend.__name__]
    assert result.status == "failed"
    assert "modified its inputs" in result.error
    np.testing.assert_array_equal(weights, weights_copy, strict=True)
    np.testing.assert_array_equal(x, x_copy, strict=True)


# -- known answers (the CI matrix's identity cases), through the sweep -------------------------------

KNOWN_CASES = [
    {"workload": "stack", "layers": 3, "batch": 2, "dim": 2, "dtype": "float32", "seed": 0,
     "init": "identity", "scale": 1.0},
    {"workload": "stack", "layers": 2, "batch": 2, "dim": 3, "dtype": "float32", "seed": 1,
     "init": "gaussian", "scale": 1.0},
]  # fmt: skip


def _render(result) -> str:
    from rich.console import Console

    from crosscheck._cli.sweep import render

    console = Console(file=io.StringIO(), width=200)
    render(result, console)
    return console.file.getvalue()


def test_sweep_checks_an_identity_case_against_its_exact_answer():
    from crosscheck._sweep.engine import sweep

    result = sweep(KNOWN_CASES, jobs=0)
    assert [r["known_answer"] for r in result.records] == ["exact", ""]
    assert all(r["passed"] for r in result.records), [r["error"] for r in result.records]
    text = _render(result)
    assert "PASSED: all 2 cases" in text
    assert "exact" in text


def test_a_wrong_backend_misses_the_exact_answer(user_module):
    from crosscheck._sweep.engine import sweep

    result = sweep(KNOWN_CASES, backends=["mymodule:mean_loss"], jobs=0)
    assert not any(r["passed"] for r in result.records)
    assert result.records[0]["known_answer"] == "mymodule:mean_loss is not exactly 4 everywhere"
    assert "FAILED: 2 of 2 cases" in _render(result)


def test_sweep_of_the_builtin_matrix_writes_the_known_answer(tmp_path, monkeypatch, capsys):
    import crosscheck._workloads.stack.matrix as matrix

    # The built-in matrix takes ~25 s; one of its identity cases is enough to test the command.
    monkeypatch.setattr(matrix, "CASES", tuple(matrix.CASES[:1]))
    monkeypatch.chdir(tmp_path)  # no [tool.crosscheck] here or above
    status = main(["sweep", "--jobs", "0", "--json", "sweep.json"])
    out = capsys.readouterr().out
    assert status == 0, out
    assert "crosscheck sweep: 1 case, the built-in CI matrix" in out
    (case,) = json.loads((tmp_path / "sweep.json").read_text())["cases"]
    assert case["known_answer"] == "exact"
    assert case["passed"] is True


def test_help_lists_the_options(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["run", "--help"])
    out = capsys.readouterr().out
    assert exc.value.code == 0
    for option in ("--layers", "--backend", "--reference", "--rtol", "--atol", "--weights", "--json"):
        assert option in out


def test_run_help_says_which_backends_run_by_default(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "default: jax, torch, numpy-fd, less the reference; the variants jax-plain," in out
    assert "torch-segments only when named" in out
    assert "every built-in but the reference" not in out


def test_bare_command_lists_the_commands_and_an_example(capsys):
    from crosscheck._cli.main import SUBCOMMANDS

    assert main([]) == 2  # nothing was checked: not a success
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("usage: crosscheck [-h] [--version] COMMAND ...")
    commands = captured.err.split("commands:")[1].split("examples:")[0].splitlines()
    listed = [line.split()[0] for line in commands if line.startswith("    ") and line[4] != " "]
    commands = ["run", "explain", "sweep", "blocks", "replay", "list", "inspect", "memory", "cost", "ste"]
    assert listed == commands
    assert len(SUBCOMMANDS) == len(listed) - 1  # run and explain share a module
    assert "  crosscheck run  " in captured.err
    assert max(len(line) for line in captured.err.split("examples:")[1].splitlines()) <= 80


def test_version(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    version = f"crosscheck {crosscheck.__version__} (distribution crosscheck-gradients)\n"
    assert capsys.readouterr().out == version


def test_the_console_entry_point_exits_with_mains_status_and_freezes_the_heap(monkeypatch):
    import gc

    import crosscheck._cli.main as cli

    monkeypatch.setattr(cli, "main", lambda: 3)
    try:
        with pytest.raises(SystemExit) as exited:
            cli.console()
        assert exited.value.code == 3
        assert gc.get_freeze_count() > 0  # the collector's shutdown passes skip what was alive
    finally:
        gc.unfreeze()
