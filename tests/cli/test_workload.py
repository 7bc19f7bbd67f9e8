"""``crosscheck run --workload``: exit statuses, the per-parameter report, one-line usage errors."""

from __future__ import annotations

import importlib.util
import json
import textwrap

import pytest
from paths import ROOT

from crosscheck._cli.main import main

BUGGY = "examples.gelu_port.mlp_buggy:workload"
FIXED = "examples.gelu_port.mlp_fixed:workload"

needs_frameworks = pytest.mark.skipif(
    importlib.util.find_spec("jax") is None or importlib.util.find_spec("torch") is None,
    reason="the GELU example needs jax and torch",
)

#: A user's module of workloads, most of them wrong in one way.
USER_MODULE = """
import numpy as np
import crosscheck

def _loss(p, i):
    return float(np.sum((i["x"] @ p["w"]) ** 2))

def grad(p, i):
    return {"w": 2 * i["x"].T @ (i["x"] @ p["w"])}

good = crosscheck.Workload(name="good", parameters={"w": (3, 2)}, inputs={"x": (4, 3)}, reference=_loss)
not_a_workload = 42
bad_shapes = crosscheck.Workload(
    name="bad-shapes", parameters={"w": (3, 2)}, inputs={"x": (4, 3)}, reference=_loss,
    generate=lambda rng, dtype: ({"w": np.zeros((2, 3))}, {"x": np.zeros((4, 3))}),
)
nan_loss = crosscheck.Workload(
    name="nan-loss", parameters={"w": (3, 2)}, inputs={"x": (4, 3)}, reference=lambda p, i: float("nan"),
)
"""


@pytest.fixture
def user_dir(tmp_path, monkeypatch):
    (tmp_path / "cli_workloads.py").write_text(textwrap.dedent(USER_MODULE))
    monkeypatch.chdir(tmp_path)
    return tmp_path


@needs_frameworks
def test_the_buggy_port_fails_and_names_the_parameters(monkeypatch, capsys, tmp_path):
    monkeypatch.chdir(ROOT)
    status = main(["run", "--workload", BUGGY, "--json", str(tmp_path / "r.json")])
    out = capsys.readouterr().out
    assert status == 1
    assert "jax vs numpy-fd, parameter `w1`" in out
    assert "Mismatched elements: 32 / 32 (100.0%) in parameter `w1`" in out
    assert "FAILED: `jax` disagrees with `numpy-fd` at parameters `w1`, `b1`, `w2`, `b2`" in out
    assert "torch vs" not in out
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["case"]["workload"] == "mlp-gelu-buggy"
    failing = {(c["backend"], c["parameter"]) for c in data["comparisons"] if not c["passed"]}
    assert failing == {("jax", p) for p in ("w1", "b1", "w2", "b2")}


@needs_frameworks
def test_the_fixed_port_passes(monkeypatch, capsys, tmp_path):
    monkeypatch.chdir(ROOT)
    junit = tmp_path / "r.xml"
    assert main(["run", "--workload", FIXED, "--dtype", "float64", "--seed", "3", "--junit", str(junit)]) == 0
    assert "PASSED: 2 candidate(s) agree with `numpy-fd` on all 4 parameters" in capsys.readouterr().out
    xml = junit.read_text()
    assert 'name="workload mlp-gelu float64 seed=3"' in xml
    assert 'name="jax vs numpy-fd [w1]"' in xml


def test_a_user_workload_with_a_user_backend(user_dir, capsys):
    status = main(["run", "--workload", "cli_workloads:good", "--backend", "cli_workloads:grad", "--quiet"])
    verdict, *caveats = capsys.readouterr().out.strip().splitlines()
    assert (status, verdict) == (0, "PASSED")
    assert caveats == [  # what a float32 pass cannot see, kept by --quiet
        "caveat of `grad`: a bug that moves the gradients by less is not seen in float32: check in float64 "
        "too (--dtype float64)"
    ]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--workload", "no_such_module_q:w"], "cannot import module `no_such_module_q`"),
        (["--workload", "cli_workloads:missing"], "has no attribute `missing`"),
        (["--workload", "cli_workloads:goood"], "has no attribute `goood` (did you mean `good`? found: "),
        (["--workload", "./cli_workloads.py:good"], "a path: use its module name, `cli_workloads:good`."),
        (["--workload", "models/cli.py:good"], "from the file's folder (e.g. `cli:good`, run in models)."),
        (["--workload", "cli_workloads:not_a_workload"], "must be a crosscheck.Workload"),
        (["--workload", "nope"], "unknown workload `nope`: expected one of stack"),
        (["--workload", "cli_workloads:bad_shapes"], "parameter `w` must have shape (3, 2); found (2, 3)"),
        (["--workload", "cli_workloads:nan_loss"], "the `reference` loss must be finite"),
        (["--workload", "cli_workloads:good", "--dim", "4"], "`--dim` applies to the stack workload only"),
        (["--workload", "cli_workloads:good", "--explain"], "`--explain` applies to the stack workload only"),
        (["--workload", "cli_workloads:good", "--save-bundle", "no/b.npz"], "cannot write `--save-bundle`"),
        (["--workload", "cli_workloads:good", "--rtol", "1e-3"], "`--rtol` and `--atol` must be given"),
        (["--workload", "cli_workloads:good"], "has no implementations to check"),
        (["--workload", "cli_workloads:good", "--backend", "torch"], "has no `torch` implementation"),
        (["--workload", "cli_workloads:good", "--backend", "jax-plain"], "has no `jax-plain` implementation"),
        (["--workload", "cli_workloads:good", "--backend", "jax-exact"], "has no `jax-exact` implementation"),
    ],
    ids=[
        "module",
        "attribute",
        "did-you-mean",
        "a-file",
        "a-file-in-a-folder",
        "not-a-workload",
        "unknown-name",
        "generate-shapes",
        "nan-loss",
        "stack-option",
        "explain",
        "bundle",
        "rtol-alone",
        "no-implementations",
        "no-such-implementation",
        "a-stack-variant",
        "an-unknown-name",
    ],
)
def test_usage_errors_are_one_line(user_dir, capsys, args, message):
    assert main(["run", *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("crosscheck: error: ")
    assert message in err


def test_the_stack_by_name_is_the_default_path(capsys):
    args = ["run", "--layers", "2", "--dim", "3", "--batch", "2", "--backend", "numpy-fd", "--quiet"]
    assert main([*args, "--workload", "stack"]) == 0
    assert capsys.readouterr().out.strip() == "PASSED"
