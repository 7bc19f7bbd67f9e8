"""Repro bundles: written on failure, replayed bit for bit, corrupt or foreign files rejected in one line."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from crosscheck._cli.main import main
from crosscheck._report.bundle import load_bundle

USER_MODULE = """
import numpy as np

def _grad(weights, x):
    ys, y = [x], x
    for w in weights:
        y = np.maximum(y @ w, 0)
        ys.append(y)
    g = 2 * y
    out = np.empty_like(weights)
    for k in reversed(range(len(weights))):
        delta = g * (ys[k + 1] > 0)
        out[k] = ys[k].T @ delta
        g = delta @ weights[k].T
    return out

def mean_not_sum(weights, x):
    return _grad(weights, x) / x.size

_calls = [0]

def drifting(weights, x):
    _calls[0] += 1
    return (_grad(weights, x) * (1 + 1e-3 * _calls[0])).astype(x.dtype)
"""


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    (tmp_path / "bundlemod.py").write_text(USER_MODULE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delitem(sys.modules, "bundlemod", raising=False)
    return tmp_path


def _run(tmp_path, *backends, options=()):
    args = [
        "run",
        "--layers",
        "3",
        "--dim",
        "4",
        "--batch",
        "2",
        "--quiet",
        "--save-bundle",
        str(tmp_path / "b.npz"),
    ]
    for backend in backends:
        args += ["--backend", backend]
    return main([*args, *options])


def test_failing_run_writes_a_bundle_that_replays_bit_for_bit(user_module, capsys):
    assert _run(user_module, "bundlemod:mean_not_sum", "jax") == 1
    bundle = load_bundle(user_module / "b.npz")
    assert set(bundle["gradients"]) == {"numpy-fd", "mean_not_sum", "jax"}
    assert bundle["workload"] == "stack" and bundle["meta"]["version"] == 2
    assert bundle["params"]["weights"].dtype == np.float32 and set(bundle["inputs"]) == {"x"}
    assert all(set(value) == {"weights"} for value in bundle["gradients"].values())
    assert bundle["meta"]["report"]["passed"] is False
    assert "environment" in bundle["meta"]["report"]
    capsys.readouterr()
    assert main(["replay", str(user_module / "b.npz"), "--trust"]) == 0
    out = capsys.readouterr().out
    assert out.count("│ bit for bit") == 3
    assert "REPRODUCED bit for bit" in out


def test_a_passing_run_writes_no_bundle(user_module):
    assert _run(user_module, "jax") == 0
    assert not (user_module / "b.npz").exists()


def test_replay_notices_a_backend_that_changes(user_module, capsys):
    # In process: the drifting backend's call count lives here, so the replay's call is its third.
    assert _run(user_module, "bundlemod:drifting", options=["--no-isolate"]) == 1
    capsys.readouterr()
    assert main(["replay", str(user_module / "b.npz"), "--trust", "--no-isolate"]) == 1
    out = capsys.readouterr().out
    assert "differs" in out and "NOT REPRODUCED" in out


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"\x00" * 50, "is not a crosscheck bundle: expected an .npz archive, found another file."),
        ("npy", "is not a crosscheck bundle: expected an .npz archive, found another file."),
        ("foreign", "is not a crosscheck bundle (no `meta` entry)."),
        ("missing", "bundle not found: "),
    ],
    ids=["random-bytes", "npy", "foreign-npz", "missing"],
)
def test_bad_bundles_are_one_line_errors(tmp_path, capsys, content, message):
    path = tmp_path / "b.npz"
    if content == "npy":
        with open(path, "wb") as file:
            np.save(file, np.ones(3))
    elif content == "foreign":
        with open(path, "wb") as file:
            np.savez(file, a=np.ones(3))
    elif content != "missing":
        path.write_bytes(content)
    assert main(["replay", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]
