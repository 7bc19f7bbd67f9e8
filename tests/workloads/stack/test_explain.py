"""Localization: planted forward and backward bugs at a known layer are found there."""

from __future__ import annotations

import sys

import numpy as np
import planted
import pytest
from paths import ROOT

import crosscheck
from crosscheck._cli.main import main
from crosscheck._workloads.stack.explain import verdict
from crosscheck._workloads.stack.judge.reference import ANSWERS

sys.path.insert(0, str(ROOT))  # the repository's examples/
from examples.planted_bugs import BackwardBugAtLayer5  # the guides' planted backend


def _forward(weights, x, scale_layer=None):
    ys, y = [], x
    for k, w in enumerate(weights):
        y = np.maximum(y @ (w * np.float32(1.01) if k == scale_layer else w), 0).astype(x.dtype)
        ys.append(y)
    return np.stack(ys)


class ForwardBugAtLayer2:
    """A port whose layer 2 uses slightly wrong weights: its gradient is that of a different function."""

    name = "forward-bug"

    def grad(self, weights, x):
        scaled = weights.copy()
        scaled[2] *= np.float32(1.01)
        g = planted.correct(scaled, x)
        g[2] *= np.float32(1.01)
        return g

    def activations(self, weights, x):
        return _forward(weights, x, scale_layer=2)


def _explained(backend):
    report = crosscheck.run(layers=8, batch=8, dim=8, seed=4, backends=[backend], explain=True)
    (comparison,) = report.comparisons
    return report, comparison


def test_forward_bug_is_located_at_its_layer():
    report, c = _explained(ForwardBugAtLayer2())
    assert not report.passed
    assert next(row["layer"] for row in c.forward if row["mismatched"]) == 2
    assert verdict(c.forward, c.per_layer).startswith("the forward pass diverges first at layer 2")


def test_backward_bug_is_located_at_its_layer_with_a_clean_forward_pass():
    report, c = _explained(BackwardBugAtLayer5())
    assert not report.passed
    assert not any(row["mismatched"] for row in c.forward)
    assert [row["layer"] for row in c.per_layer if row["mismatched"]][-1] == 5
    assert all(row["mismatched"] == 0 for row in c.per_layer[6:])
    assert verdict(c.forward, c.per_layer) == (
        "the forward pass agrees at every layer: the defect is in the backward pass; going back from the "
        "loss, the gradient first differs at layer 5"
    )


@pytest.mark.parametrize("name", ["jax", "torch", "numpy-fd"])
def test_built_in_activations_agree_layer_by_layer(name):
    try:
        backend = crosscheck.load_backend(name)
    except crosscheck.BackendUnavailable as exc:
        pytest.skip(str(exc))
    report = crosscheck.run(layers=5, batch=4, dim=6, backends=[backend], explain=True)
    (c,) = report.comparisons
    assert len(c.forward) == 5
    assert all(row["mismatched"] == 0 for row in c.forward)
    assert verdict(c.forward, c.per_layer) == "every layer agrees, forward and backward"


def test_worst_entries_carry_index_values_terms_and_kinks():
    _, c = _explained(planted.off_at_largest(1e-2))
    top = c.worst_entries[0]
    assert top["index"] == list(c.worst_index)
    assert top["ratio"] > 1
    assert set(top["terms"]) >= {"rounding", "reference", "floor", "slack"}


def test_explain_command_prints_the_layer_table_and_verdict(capsys):
    assert main(["explain", "--layers", "3", "--dim", "4", "--backend", "numpy-fd"]) == 0
    out = capsys.readouterr().out
    assert "layer by layer" in out
    assert "verdict: every layer agrees, forward and backward" in out
    assert "environment: python " in out and "numpy " in out


def _tf32(a):
    """Round float32 values to TF32's 10-bit significand (round to nearest)."""
    bits = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
    return ((bits + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32)


class TF32Backend:
    """Rounds every matmul input to TF32, as GPUs do by default in some frameworks, unless asked not to."""

    name = "tf32"

    def __init__(self):
        self.highest = False

    def grad(self, weights, x):
        if self.highest or weights.dtype == np.float64:
            return planted.correct(weights, x)
        ys, masks, y = [x], [], x
        for w in weights:
            z = _tf32(y) @ _tf32(w)
            masks.append(z > 0)
            y = np.maximum(z, 0)
            ys.append(y)
        g, out = 2 * y, np.empty_like(weights)
        for k in reversed(range(len(weights))):
            delta = g * masks[k]
            out[k] = _tf32(ys[k]).T @ _tf32(delta)
            g = _tf32(delta) @ _tf32(weights[k]).T
        return out

    def highest_precision(self):
        import contextlib

        @contextlib.contextmanager
        def context():
            self.highest = True
            try:
                yield
            finally:
                self.highest = False

        return context()


class Nondeterministic:
    name = "noisy"

    def __init__(self):
        self.rng = np.random.default_rng()

    def grad(self, weights, x):
        g = planted.correct(weights, x)
        return (g * (1 + 1e-3 * self.rng.standard_normal(g.shape))).astype(g.dtype)


@pytest.mark.parametrize(
    ("backend", "expected"),
    [
        (TF32Backend(), "explained by reduced matmul precision"),
        (Nondeterministic(), "nondeterministic"),
        (
            BackwardBugAtLayer5(),
            "genuine: the forward pass agrees at every layer: the defect is in the backward "
            "pass; going back from the loss, the gradient first differs at layer 5",
        ),
        (planted.float32_always, None),
    ],
    ids=["tf32", "nondeterministic", "genuine", "passes"],
)
def test_classification_by_controlled_reruns(backend, expected):
    # repeat=1: the engine's own second call would fail the nondeterministic one before explain ran.
    report = crosscheck.run(layers=8, batch=8, dim=8, seed=4, backends=[backend], explain=True, repeat=1)
    (c,) = report.comparisons
    if expected is None:
        assert c.passed and not c.classification
        return
    assert not c.passed
    assert c.classification["verdict"] == expected
    assert c.classification["evidence"]


def test_a_nondeterministic_backend_fails_its_second_call():
    report = crosscheck.run(layers=8, batch=8, dim=8, seed=4, backends=[Nondeterministic()])
    assert not report.passed and not report.comparisons
    assert report.backends["noisy"].status == "failed"
    assert report.backends["noisy"].error.startswith(
        "the second call differs: stateful or nondeterministic ("
    )


def test_float32_arithmetic_beyond_its_rounding_is_recognised():
    def half_precision_products(weights, x):
        if weights.dtype == np.float64:
            return planted.correct(weights, x)
        return planted.correct(weights.astype(np.float16).astype(np.float32), x)

    report = crosscheck.run(
        layers=8, batch=8, dim=8, seed=4, backends=[half_precision_products], explain=True
    )
    (c,) = report.comparisons
    assert c.classification["verdict"] == "explained by float32 arithmetic beyond its modelled rounding"


@pytest.mark.parametrize("name", ["jax", "torch"])
def test_highest_precision_contexts_restore_the_framework_settings(name):
    try:
        backend = crosscheck.load_backend(name)
    except crosscheck.BackendUnavailable as exc:
        pytest.skip(str(exc))
    if name == "torch":
        import torch

        torch.set_float32_matmul_precision("high")
        try:
            with backend.highest_precision():
                assert torch.get_float32_matmul_precision() == "highest"
            assert torch.get_float32_matmul_precision() == "high"
        finally:
            torch.set_float32_matmul_precision("highest")
    else:
        import jax

        with backend.highest_precision():
            assert str(jax.config.jax_default_matmul_precision) == "highest"
        assert jax.config.jax_default_matmul_precision is None


def test_another_derivative_at_exact_zeros_is_classified_as_kink_ambiguity():
    report = crosscheck.run(
        layers=8,
        batch=8,
        dim=8,
        seed=1,
        init="integer",
        backends=[planted.relu_derivative_one_at_zero],
        explain=True,
    )
    (c,) = report.comparisons
    assert not c.passed  # caught
    assert c.classification["verdict"].startswith("kink ambiguity")
    assert c.classification["evidence"][-1] == "with the weights nudged away from every ReLU kink it agrees"


@pytest.mark.parametrize("mode", ["full", "outputs"])
def test_the_nudged_recheck_asks_the_oracle_as_the_first_check_did(mode, monkeypatch):
    # The full oracle where the first check took the layers' outputs would take hours at d = 1024.
    asked: list[str] = []
    oracle = type(crosscheck.load_backend("numpy-fd"))  # the class the registry loads
    for method in ("estimate", "estimate_outputs"):
        real = getattr(oracle, method)

        def counted(self, *args, _real=real, _method=method, **kwargs):
            asked.append(_method)
            return _real(self, *args, **kwargs)

        monkeypatch.setattr(oracle, method, counted)
    report = crosscheck.run(
        layers=8,
        batch=8,
        dim=8,
        seed=1,
        init="integer",
        backends=[planted.relu_derivative_one_at_zero],
        explain=True,
        oracle_mode=mode,
    )
    (c,) = report.comparisons
    assert c.classification["verdict"].startswith("kink ambiguity")
    assert asked == [ANSWERS[mode][0]] * 2  # the check's, then the nudged re-check's


class StaleRecomputation:
    """Checkpointed, but the recomputation in the backward pass reads the next layer's weights."""

    name = "stale"

    def __init__(self):
        self.checkpointed = True

    def grad(self, weights, x):
        if not self.checkpointed:
            return planted.correct(weights, x)
        ys, y = [x], x
        for w in weights:
            y = np.maximum(y @ w, 0)
            ys.append(y)
        g, out = 2 * y, np.empty_like(weights)
        for k in reversed(range(len(weights))):
            stale = weights[min(k + 1, len(weights) - 1)]
            recomputed = ys[k] @ stale  # the bug: the wrong layer's weights when recomputing
            delta = g * (recomputed > 0)
            out[k] = ys[k].T @ delta
            g = delta @ weights[k].T
        return out

    def without_checkpointing(self):
        import contextlib

        @contextlib.contextmanager
        def context():
            self.checkpointed = False
            try:
                yield
            finally:
                self.checkpointed = True

        return context()


def test_a_checkpointing_bug_is_classified_as_such():
    report = crosscheck.run(layers=8, batch=8, dim=8, seed=4, backends=[StaleRecomputation()], explain=True)
    (c,) = report.comparisons
    assert not c.passed
    assert c.classification["verdict"] == "explained by checkpointing: the recomputation differs"


@pytest.mark.parametrize("name", ["jax", "torch"])
def test_built_ins_without_checkpointing_agree_to_the_bit_or_rounding(name):
    try:
        backend = crosscheck.load_backend(name)
    except crosscheck.BackendUnavailable as exc:
        pytest.skip(str(exc))
    weights, x = crosscheck.make_inputs(crosscheck.Case(layers=4, dim=6, batch=3))
    checkpointed = backend.grad(weights, x)
    with backend.without_checkpointing():
        plain = backend.grad(weights, x)
    np.testing.assert_allclose(plain, checkpointed, rtol=1e-5, atol=1e-6)
    assert backend._checkpoint
