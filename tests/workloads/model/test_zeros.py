"""Gradients that are zero in every implementation, with a backend as reference: the oracle runs on
those tensors alone (directions of each side's own float64 loss) and confirms or refutes the zero; and
a port's default loss reaches every output of its model."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import crosscheck

torch = pytest.importorskip("torch")
jax = pytest.importorskip("jax")
nn = pytest.importorskip("flax.linen")


def attention(*, stop=False, two=False, jax_pool=None, **port):
    """Self-attention with two key projections, ``k`` and ``k2``, with biases (their gradients are zero by
    construction: softmax is shift-invariant);
    ``stop``: the keys are added to the output too, and both sides stop the key bias's gradient (a
    wrong derivative both agree on); ``jax_pool``: the port's pooler activation (a planted bug);
    ``two``: a
    second output, a pooler on the first position."""
    import jax.numpy as jnp

    class TorchAttention(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.q, self.k, self.k2, self.v = (torch.nn.Linear(4, 4) for _ in range(4))
            self.pool = torch.nn.Linear(4, 3) if two else None

        def forward(self, x):
            k = self.k(x) - self.k.bias + self.k.bias.detach() if stop else self.k(x)
            s = self.q(x) @ (k + self.k2(x)).transpose(-1, -2)
            h = torch.softmax(s, -1) @ self.v(x) + (k if stop else 0)
            return (h, torch.tanh(self.pool(h[:, 0]))) if two else h

    class FlaxAttention(nn.Module):
        @nn.compact
        def __call__(self, x):
            q, v = nn.Dense(4, name="q")(x), nn.Dense(4, name="v")(x)
            dense = nn.Dense(4, name="k")
            k = dense(x)
            if stop:
                bias = dense.variables["params"]["bias"]
                k = k - bias + jax.lax.stop_gradient(bias)
            s = q @ jnp.swapaxes(k + nn.Dense(4, name="k2")(x), -1, -2)
            h = jax.nn.softmax(s, -1) @ v + (k if stop else 0)
            pool = nn.Dense(3, name="pool")(h[:, 0]) if two else None
            return (h, (jax_pool or jnp.tanh)(pool)) if two else h

    torch.manual_seed(0)
    return crosscheck.Port(
        name="attention",
        torch=TorchAttention().eval(),
        jax=FlaxAttention(),
        inputs=lambda rng, dtype: {"x": rng.standard_normal((2, 3, 4)).astype(dtype)},
        **port,
    )


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_zero_by_construction_bias_is_confirmed_with_a_backend_as_reference(dtype):
    report = crosscheck.run(workload=attention(), reference="torch", backends=["jax"], dtype=dtype)
    assert report.passed, report.problems
    assert report.oracle["zero_in_every_implementation"]["within rounding"] == ["k.bias", "k2.bias"]
    checks = report.oracle["zero_checks"]
    statuses = {(k, side): c["status"] for k, by in checks.items() for side, c in by.items()}
    assert statuses == {(k, s): "confirmed" for k in ("k.bias", "k2.bias") for s in ("torch", "jax")}
    assert all(abs(c["derivative"]) <= c["error"] for by in checks.values() for c in by.values())
    confirmed = (
        "zero by construction: confirmed by differences of each side's own float64 loss: `k.bias`, `k2.bias`"
    )
    assert any(line.endswith(confirmed) for line in report.oracle["lines"])


def test_a_zero_that_the_loss_contradicts_fails_naming_the_tensor():
    """Both sides stop the key bias's gradient while the loss depends on it: they agree on zero, and
    both are wrong; the oracle on their own losses says so."""
    report = crosscheck.run(workload=attention(stop=True), reference="torch", backends=["jax"])
    assert not report.passed
    zero = report.oracle["zero_in_every_implementation"]
    assert zero == {"exactly": ["k.bias"], "within rounding": ["k2.bias"]}
    refuted = [p for p in report.problems if "the loss depends on" in p]
    assert len(refuted) == 2 and all("the loss depends on `k.bias`" in p for p in refuted)
    assert {"`torch`'s own" in p for p in refuted} == {True, False}
    checks = report.oracle["zero_checks"]
    assert {s: c["status"] for s, c in checks["k.bias"].items()} == {"torch": "refuted", "jax": "refuted"}
    assert {s: c["status"] for s, c in checks["k2.bias"].items()} == {
        "torch": "confirmed",
        "jax": "confirmed",
    }


def test_the_default_loss_reaches_every_output_of_the_model():
    """A model with two outputs (the hidden states and a pooler): the pooler's parameters have a gradient,
    and a bug in the pooler alone is found (the default loss was of the first output only)."""
    report = crosscheck.run(workload=attention(two=True), reference="torch", backends=["jax"])
    assert report.passed, report.problems
    zero = report.oracle["zero_in_every_implementation"]
    assert zero == {"exactly": [], "within rounding": ["k.bias", "k2.bias"]}
    assert "projection of every output array" in report.case["loss"]
    planted = attention(two=True, jax_pool=lambda z: jax.nn.sigmoid(z) * 2 - 1)
    report = crosscheck.run(workload=planted, reference="torch", backends=["jax"])
    assert not report.passed
    assert {c.parameter for c in report.comparisons if not c.passed} >= {"pool.weight", "pool.bias"}


def test_every_floating_output_is_projected_in_order():
    from crosscheck._workloads.losses import floating_outputs, outputs_loss, projection_loss

    a, b, ids = np.ones((2, 3)), np.full(4, 2.0), np.arange(3)
    assert [x.shape for x in floating_outputs({"h": a, "ids": ids, "more": (None, [b])})] == [(2, 3), (4,)]
    assert outputs_loss((a, ids, b)) == pytest.approx(projection_loss(a) + projection_loss(b, seed=1))
    with pytest.raises(ValueError, match="no floating-point array"):
        outputs_loss((ids, None))


@pytest.mark.parametrize("reference", ["torch", None])
def test_a_parameter_the_loss_does_not_reach_is_named_and_not_checked(reference):
    """The loss sees the first output only: the pooler does not reach it. Its zero gradient is confirmed
    (the loss does not depend on it) and still it was not checked: the run fails, naming it, with the
    fix; declared ``unused``, it is said and the run passes. The key biases, reached, are confirmed."""
    first = {"output": lambda out: out[0]}
    run = {"reference": reference} if reference else {"oracle_mode": "screen"}
    report = crosscheck.run(workload=attention(two=True, **first), backends=["jax"], **run)
    assert not report.passed
    assert report.oracle["reach"] == {"unreached": ["pool.weight", "pool.bias"], "declared unused": []}
    assert report.oracle["zero_confirmed"] == ["k.bias", "k2.bias"]
    assert report.problems[-1].startswith("the loss does not reach `pool.weight`, `pool.bias`")
    assert report.problems[-1].endswith('crosscheck.Port(..., unused=("pool.*",))')
    declared = attention(two=True, unused=("pool.*",), **first)
    report = crosscheck.run(workload=declared, backends=["jax"], **run)
    assert report.passed, report.problems
    assert report.oracle["reach"] == {"unreached": [], "declared unused": ["pool.weight", "pool.bias"]}
    assert any(
        line.startswith("declared unused (`unused=`): `pool.weight`, `pool.bias`")
        for line in report.oracle["lines"]
    )


@pytest.mark.parametrize(
    ("unused", "message"), [("pool.*", "must be a list"), (("nothing.*",), "matches no parameter")]
)
def test_a_bad_unused_declaration_is_refused_in_one_line(unused, message):
    with pytest.raises((TypeError, ValueError), match=message):
        crosscheck.run(workload=attention(two=True, unused=unused), reference="torch", backends=["jax"])


def test_a_side_that_cannot_run_in_float64_leaves_the_zero_to_the_others():
    # CLIP's PyTorch model raises in float64 (a mask of float32's minimum overflows): JAX's own loss
    # confirms the zero, said; any other reason a side was not judged still fails the run.
    from crosscheck._workloads.model.zeros import NO_FLOAT64, ZeroCheck, judged, problems

    cannot = ZeroCheck("torch", "k.bias", "not judged", why=f"`torch`'s loss {NO_FLOAT64}: RuntimeError")
    confirmed = ZeroCheck("jax", "k.bias", "confirmed", 2, 0.0, 1e-9)
    outcome = judged({"k.bias": {"torch": cannot, "jax": confirmed}}, ["k.bias"], ["torch", "jax"])
    assert outcome["confirmed"] == ["k.bias"] and outcome["one side"] == [cannot] and not problems(outcome)
    other = dataclasses.replace(cannot, why="every direction's error bar is too wide")
    outcome = judged({"k.bias": {"torch": other, "jax": confirmed}}, ["k.bias"], ["torch", "jax"])
    assert outcome["confirmed"] == [] and "could not confirm" in problems(outcome)[0]
    alone = judged({"k.bias": {"torch": cannot}}, ["k.bias"], ["torch", "jax"])
    assert alone["confirmed"] == [] and problems(alone)


def _recorded(events, original, event):
    def wrapped(self, *args, **kwargs):
        events.append(event)
        return original(self, *args, **kwargs)

    return wrapped


def test_each_side_releases_what_its_losses_hold_after_its_zero_check(monkeypatch):
    """Each side's adapter drops the arrays its last loss evaluations hold once its zero check's
    evaluations along directions are done (``release_evaluations``, as after the oracle's differences):
    after each side's last ``loss``/``losses`` call comes a release (issue 38)."""
    from crosscheck._workloads.model.workload import _framework_backend

    events: list[tuple[str, str]] = []
    for framework in ("torch", "jax"):
        cls = type(_framework_backend(framework, lambda *a: 0.0))
        for method in ("loss", "losses", "release_evaluations"):
            monkeypatch.setattr(cls, method, _recorded(events, getattr(cls, method), (framework, method)))
    report = crosscheck.run(workload=attention(), reference="torch", backends=["jax"])
    assert report.passed, report.problems
    for framework in ("torch", "jax"):
        mine = [method for side, method in events if side == framework]
        evaluated = max(i for i, m in enumerate(mine) if m != "release_evaluations")
        assert mine.count("loss") + mine.count("losses") > 8, mine  # the probe and the directions
        assert "release_evaluations" in mine[evaluated:], (framework, mine[evaluated - 2 :])


def test_a_side_in_a_worker_releases_its_evaluations_there():
    """``--isolate``: the worker serves ``release_evaluations`` (``isolate_worker.METHODS``), so the oracle's
    and the zero check's releases reach the adapter in its worker; the verdict is the one in process."""
    from crosscheck._engine.caller import Caller
    from crosscheck._engine.process.isolate import IsolatedBackend
    from crosscheck._engine.process.isolate_worker import METHODS, _has
    from crosscheck._workloads.model.oracle.function import release
    from crosscheck._workloads.model.oracle.sources import releaser
    from crosscheck._workloads.model.workload import _framework_backend

    for framework in ("torch", "jax"):  # what a worker says its adapter has (its load's description)
        adapter = _framework_backend(framework, lambda *a: 0.0)
        assert "release_evaluations" in [m for m in METHODS if _has(adapter, m)]

    class Worker:
        def __init__(self):
            self.sent = []
            self.settings = {}  # the run's JAX settings, sent with each call (``isolate.Worker``)

        def request(self, message, timeout):
            self.sent.append(message["method"])
            return {"value": None, "error": None, "seconds": 0.0, "notes": {}}

    worker = Worker()
    methods = ["grad", "loss", "release_evaluations"]
    backend = IsolatedBackend(worker, {"name": "x", "info": {}, "methods": methods, "contexts": []})
    release(releaser(backend, Caller({})))
    assert worker.sent == ["release_evaluations"]
    report = crosscheck.run(workload=attention(), reference="torch", backends=["jax"], isolate=True)
    assert report.passed, report.problems
    assert report.oracle["zero_in_every_implementation"]["within rounding"] == ["k.bias", "k2.bias"]
