"""Localization: planted forward and backward bugs at a known layer are found there."""

from __future__ import annotations

import numpy as np
import planted
import pytest

import crosscheck
from crosscheck._cli import main
from crosscheck._explain import verdict


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


class BackwardBugAtLayer5:
    """Right forward pass; the backward pass drops the ReLU mask of layer 5 (derivative 1 everywhere)."""

    name = "backward-bug"

    def grad(self, weights, x):
        ys, masks, y = [x], [], x
        for w in weights:
            z = y @ w
            masks.append(z > 0)
            y = np.maximum(z, 0)
            ys.append(y)
        g, out = 2 * y, np.empty_like(weights)
        for k in reversed(range(len(weights))):
            delta = g if k == 5 else g * masks[k]
            out[k] = ys[k].T @ delta
            g = delta @ weights[k].T
        return out

    def activations(self, weights, x):
        return _forward(weights, x)


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
