"""``[tool.crosscheck]``: finding it, the matrix it declares, command-line overrides, one-line errors."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from crosscheck._cli.main import build_parser, main
from crosscheck._cli.sweep import resolve_config
from crosscheck._sweep.config import ConfigError, SweepConfig, cases, find_config, load_config, options
from crosscheck._workloads.stack.matrix import CASES

EXAMPLE = """
[tool.crosscheck]
workloads = ["stack"]
layers = [8]
batch = [8]
dim = [16, 32]
dtypes = ["float32", "float64"]
seeds = [0, 1, 2]
inits = ["gaussian", "integer"]
backends = ["jax", "torch"]
reference = "numpy-fd"
rtol = 1e-6
atol = 1e-9
strict = true
timeout = 600
jax_platform = "cpu"
jax_precision = "highest"
"""


def _write(folder: Path, text: str) -> Path:
    path = folder / "pyproject.toml"
    path.write_text(textwrap.dedent(text))
    return path


def test_the_matrix_is_the_cartesian_product(tmp_path):
    config = load_config(_write(tmp_path, EXAMPLE))
    found = cases(config)
    assert len(found) == 2 * 2 * 3 * 2
    assert found[0] == {
        "workload": "stack",
        "layers": 8,
        "batch": 8,
        "dim": 16,
        "dtype": "float32",
        "seed": 0,
        "init": "gaussian",
        "scale": 1.0,
    }
    assert found[1]["init"] == "integer"  # the last key varies fastest
    assert {(c["dim"], c["dtype"], c["seed"], c["init"]) for c in found} == {
        (d, t, s, i)
        for d in (16, 32)
        for t in ("float32", "float64")
        for s in (0, 1, 2)
        for i in ("gaussian", "integer")
    }
    assert options(config) == {
        "backends": ["jax", "torch"],
        "reference": "numpy-fd",
        "rtol": 1e-6,
        "atol": 1e-9,
        "strict": True,
        "jax_platform": "cpu",
        "jax_precision": "highest",
        # every other declared setting, at its default where the file gives none
        "jax_deterministic": "default",
        "torch_device": "default",
        "torch_matmul_tf32": "default",
        "torch_cudnn_tf32": "default",
        "torch_deterministic": "default",
    }
    assert config.get("timeout") == 600


def test_missing_matrix_keys_take_the_run_defaults(tmp_path):
    config = load_config(_write(tmp_path, "[tool.crosscheck]\ndim = [4]\n"))
    assert cases(config) == [
        {
            "workload": "stack",
            "layers": 8,
            "batch": 8,
            "dim": 4,
            "dtype": "float32",
            "seed": 0,
            "init": "gaussian",
            "scale": 1.0,
        }
    ]
    assert options(config)["backends"] is None  # every built-in


def test_other_workloads_vary_only_dtype_and_seed(tmp_path):
    text = '[tool.crosscheck]\nworkloads = ["stack", "mine:workload"]\ndim = [2, 4]\nseeds = [0, 1]\n'
    found = cases(load_config(_write(tmp_path, text)))
    assert [c for c in found if c["workload"] != "stack"] == [
        {"workload": "mine:workload", "dtype": "float32", "seed": 0},
        {"workload": "mine:workload", "dtype": "float32", "seed": 1},
    ]
    assert len([c for c in found if c["workload"] == "stack"]) == 4


def test_without_matrix_keys_the_builtin_matrix_runs(tmp_path):
    config = load_config(_write(tmp_path, '[tool.crosscheck]\nbackends = ["jax"]\n'))
    found = cases(config)
    assert found == [{"workload": "stack", **case.to_dict()} for case in CASES]
    assert cases(SweepConfig()) == found


def test_the_nearest_configured_pyproject_is_found(tmp_path):
    inner = tmp_path / "a" / "b"
    inner.mkdir(parents=True)
    outer = _write(tmp_path, "[tool.crosscheck]\ndim = [2]\n")
    _write(tmp_path / "a", "[project]\nname = 'x'\n")  # no [tool.crosscheck]: skipped, as ruff does
    assert find_config(inner) == outer
    nearer = _write(inner, "[tool.crosscheck]\ndim = [3]\n")
    assert find_config(inner) == nearer


def test_no_config_anywhere(tmp_path):
    _write(tmp_path, "[project]\nname = 'x'\n")
    assert find_config(tmp_path) is None


def _args(argv: list[str]):
    return build_parser().parse_args(["sweep", *argv])


def test_options_replace_the_keys_they_name(tmp_path, monkeypatch):
    _write(tmp_path, EXAMPLE)
    monkeypatch.chdir(tmp_path)
    config = resolve_config(_args(["--dim", "4", "--dim", "8", "--dtype", "float64", "--no-strict"]))
    found = cases(config)
    assert {c["dim"] for c in found} == {4, 8}
    assert {c["dtype"] for c in found} == {"float64"}
    assert {c["seed"] for c in found} == {0, 1, 2}  # from the file
    assert options(config)["strict"] is False
    assert options(config)["backends"] == ["jax", "torch"]


def test_config_option_names_the_file(tmp_path, monkeypatch):
    (tmp_path / "conf").mkdir()
    path = _write(tmp_path / "conf", "[tool.crosscheck]\nseeds = [7]\n")
    _write(tmp_path, "[tool.crosscheck]\nseeds = [1]\n")  # found, but --config wins
    monkeypatch.chdir(tmp_path)
    config = resolve_config(_args(["--config", str(path)]))
    assert {c["seed"] for c in cases(config)} == {7}


T = "`[tool.crosscheck]."
LIST = " must be a non-empty list of "
CONFIG_ERRORS = [
    ("dtypes = 3", T + "dtypes`" + LIST + "strings from float32, float64; found 3."),
    ('dtypes = ["float16"]', T + "dtypes`" + LIST + "strings from float32, float64; found ['float16']."),
    ("dim = [0]", T + "dim`" + LIST + "positive integers; found [0]."),
    ("dim = []", T + "dim`" + LIST + "positive integers; found []."),
    ("seeds = [1.5]", T + "seeds`" + LIST + "non-negative integers; found [1.5]."),
    ('inits = ["zeros"]', T + "inits`" + LIST + "strings from gaussian, identity, integer, nearzero;"),
    ('strict = "yes"', T + "strict` must be true or false; found 'yes'."),
    ("timeout = 0", T + "timeout` must be a positive number of seconds, at most 2147483"),
    ("timeout = 1e12", T + "timeout` must be a positive number of seconds, at most 2147483 (the longest"),
    ('backends = "jax"', T + "backends`" + LIST + "backend names or import strings; found 'jax'."),
    ("rtol = 1e-6", T + "rtol` and " + T + "atol` must be given together or not at all; found only"),
    ("seed = [1]", "unknown key " + T + "seed`: expected one of workloads, layers, batch, dim, dtypes,"),
    (
        "seed = [2]",
        "jax_precision, jax_deterministic, torch_device, torch_matmul_tf32, torch_cudnn_tf32, "
        "torch_deterministic. Did",
    ),
    ("dim = [", "is not valid TOML"),
    ('jax_platform = "tpu"', T + "jax_platform` must be one of default, cpu; found 'tpu'."),
    ('jax_precision = "low"', T + "jax_precision` must be one of default, high, highest; found 'low'."),
]


@pytest.mark.parametrize(("line", "message"), CONFIG_ERRORS, ids=[e[0] for e in CONFIG_ERRORS])
def test_config_errors_are_one_line_exit_2(tmp_path, monkeypatch, capsys, line, message):
    _write(tmp_path, f"[tool.crosscheck]\n{line}\n")
    monkeypatch.chdir(tmp_path)
    assert main(["sweep"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("crosscheck: error: ")
    assert message in lines[0]


OPTION_ERRORS = [
    (["--dim", "0"], "`--dim` must be a non-empty list of positive integers; found [0]."),
    (["--rtol", "1e-3"], "`--rtol` and `--atol` must be given together or not at all; found only `--rtol`."),
    (["--timeout", "-1"], "`--timeout` must be a positive number of seconds"),
    (["--timeout", "1e300"], "`--timeout` must be a positive number of seconds, at most 2147483 (the"),
    (["--jobs", "-1"], "`--jobs` must be 0 or more, found -1."),
    (["--backend", "nope"], "unknown backend `nope`: expected one of jax, torch, numpy-fd"),
    (["--workload", "nope"], "workload `nope`"),
    (["--config", "missing.toml"], "cannot read missing.toml"),
    (["--config", "empty.toml"], "empty.toml has no [tool.crosscheck] table."),
    (["--dtype", "float16"], "argument --dtype: invalid choice: 'float16'"),
    (["--jax-platform", "gpu"], "`--jax-platform` must be one of default, cpu; found 'gpu'."),
    (["--jax-precision", "low"], "`--jax-precision` must be one of default, high, highest; found 'low'."),
    (["--scheduler", "nonsense"], "`--scheduler` must be an address like tcp://HOST:8786; found 'nonsense'."),
    (
        ["--jobs", "0", "--scheduler", "tcp://127.0.0.1:8786"],
        "`--jobs` and `--scheduler` exclude each other: the cases run either on worker processes here or on "
        "the Dask cluster; found both.",
    ),
]


@pytest.mark.parametrize(("argv", "message"), OPTION_ERRORS, ids=[" ".join(a) for a, _ in OPTION_ERRORS])
def test_option_errors_are_one_line_exit_2(tmp_path, monkeypatch, capsys, argv, message):
    (tmp_path / "empty.toml").write_text("[project]\nname = 'x'\n")
    _write(tmp_path, "[tool.crosscheck]\ndim = [2]\n")
    monkeypatch.chdir(tmp_path)
    assert main(["sweep", *argv]) == 2
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert message in lines[0]


def test_load_config_raises_config_error(tmp_path):
    with pytest.raises(ConfigError, match="has no"):
        load_config(_write(tmp_path, "[tool.other]\nx = 1\n"))


def test_the_jax_sides_settings_reach_every_case(tmp_path, monkeypatch):
    """``jax_platform`` and ``jax_precision`` of the file (an option replacing one) are in effect where
    each case's JAX side runs: its ``info()``, read there, says so, as does the case's report."""
    pytest.importorskip("jax")
    from crosscheck._sweep.engine import sweep

    _write(tmp_path, '[tool.crosscheck]\njax_platform = "cpu"\njax_precision = "high"\n')
    monkeypatch.chdir(tmp_path)
    chosen = {k: v for k, v in options(resolve_config(_args(["--jax-precision", "highest"]))).items()}
    assert (chosen["jax_platform"], chosen["jax_precision"]) == ("cpu", "highest")
    tiny = [{"workload": "stack", "layers": 1, "batch": 2, "dim": 2, "dtype": "float32", "seed": 0}]
    del chosen["backends"]
    (record,) = sweep(tiny, **{**chosen, "backends": ["jax"]}, jobs=0).records
    report = record["report"]
    assert report["jax_settings"] == {
        "jax_platform": "cpu",
        "jax_precision": "highest",
        "jax_deterministic": "default",
    }
    assert report["backends"]["jax"]["info"]["matmul_precision"] == "highest"
