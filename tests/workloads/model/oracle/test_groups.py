"""Screening by groups of tensors (``oracle.groups``, ``model.groups``): every tensor at once, halved where a
direction disagrees; the cost of a healthy model does not grow with its number of tensors."""

from __future__ import annotations

import numpy as np

import crosscheck
from crosscheck._workloads.model.oracle.entries import base_steps
from crosscheck._workloads.model.oracle.groups import JOINT, Group

WIDTH, BATCH = 3, 5


def _chain(tensors: int) -> tuple[crosscheck.Workload, callable]:
    """``tensors`` gains applied in turn, ``h <- tanh(h * w_i)``, and ``sum(h * r)``: a NumPy reference
    and its exact gradient (a plain function backend)."""
    names = [f"w{i}" for i in range(tensors)]

    def forward(p, x):
        hs = [x]
        for k in names:
            hs.append(np.tanh(hs[-1] * p[k]))
        return hs

    def reference(p, i):
        return float(np.sum(forward(p, i["x"])[-1] * i["r"]))

    def grad(p, i):
        hs = forward(p, i["x"])
        upstream, out = i["r"], {}
        for j in reversed(range(tensors)):
            dz = upstream * (1 - hs[j + 1] ** 2)
            out[names[j]] = np.sum(dz * hs[j], axis=0).astype(p[names[j]].dtype)
            upstream = dz * p[names[j]]
        return out

    def generate(rng, dtype):
        params = {k: (1 + 0.3 * rng.standard_normal(WIDTH)).astype(dtype) for k in names}
        inputs = {"x": rng.standard_normal((BATCH, WIDTH)).astype(dtype)}
        inputs["r"] = rng.standard_normal((BATCH, WIDTH)).astype(dtype)
        return params, inputs

    workload = crosscheck.Workload(
        name=f"chain-{tensors}",
        parameters=dict.fromkeys(names, (WIDTH,)),
        inputs={"x": (BATCH, WIDTH), "r": (BATCH, WIDTH)},
        reference=reference,
        generate=generate,
    )
    return workload, grad


def _run(workload, backend, **kwargs):
    return crosscheck.run(
        workload=workload, backends=[backend], dtype="float64", oracle_mode="screen", **kwargs
    )


def test_a_healthy_model_costs_the_same_with_5_or_60_tensors():
    counts = {}
    for tensors in (5, 60):
        workload, grad = _chain(tensors)
        report = _run(workload, grad)
        assert report.passed, report.problems
        (counts[tensors],) = report.oracle["evaluations"].values()
        assert all("judged in a group of" in c.coverage for c in report.comparisons)
        assert sorted(report.oracle["coverage"]["in a group"]) == sorted(workload.parameters)
    # 4 directions over the group of every tensor, ~8 evaluations each: not 12 times more for 12 times
    # the tensors (tensor by tensor, 60 tensors cost 60 x 4 directions).
    assert counts[60] <= 1.5 * counts[5] < 4 * 60 * 8


def _planted(grad, errors):
    def planted(p, i):
        out = grad(p, i)
        return {k: v + errors.get(k, 0.0) for k, v in out.items()}

    return planted


def test_a_group_that_disagrees_is_halved_down_to_the_tensor():
    workload, grad = _chain(16)
    error = np.zeros(WIDTH)
    error[1] = 1e-6  # one entry of one tensor of 16
    report = _run(workload, _planted(grad, {"w11": error}))
    failing = [c.parameter for c in report.comparisons if not c.passed]
    assert not report.passed and failing == ["w11"]
    (c,) = [c for c in report.comparisons if c.parameter == "w11"]
    assert c.coverage.startswith("screened: 4 random directions")  # its own, after the halvings
    judged = [c for c in report.comparisons if c.parameter != "w11"]
    assert all(c.passed and c.coverage.startswith("screened") for c in judged)


def test_an_error_that_cancels_along_one_direction_is_caught_by_the_others():
    # Errors in two tensors whose projections on the first direction of the group of every tensor
    # cancel exactly: that direction agrees, the other three do not, and the halves name both tensors.
    workload, grad = _chain(8)
    params, _ = workload.make(seed=0, dtype="float64")
    group = Group.of(list(params), {k: v.shape for k, v in params.items()})
    (first, *_) = group.directions(params, 4)
    pieces = group.pieces(first.signs * first.step)
    steps = base_steps(params)
    a, b = np.zeros(WIDTH), np.zeros(WIDTH)
    a[0] = 1e-5
    b[0] = -a[0] * pieces["w2"][0] / pieces["w5"][0]
    assert abs(a[0] * pieces["w2"][0] + b[0] * pieces["w5"][0]) < 1e-20 and steps["w2"] > 0
    report = _run(workload, _planted(grad, {"w2": a, "w5": b}), seed=0)
    failing = sorted(c.parameter for c in report.comparisons if not c.passed)
    assert not report.passed and failing == ["w2", "w5"]


class _Reads(dict):
    """A mapping that counts its reads (``term[name]``)."""

    reads = 0

    def __getitem__(self, key):
        self.reads += 1
        return super().__getitem__(key)


def test_directions_sharing_a_step_share_their_quadrature_to_the_bit():
    from crosscheck._workloads.model.oracle.directions import project_quadrature

    group = Group.of(["a", "b"], {"a": (7, 3), "b": (5,)})
    rng = np.random.default_rng(2)
    params = {"a": rng.standard_normal((7, 3)), "b": rng.standard_normal(5)}
    dirs = group.directions(params, 4)
    other = group.directions({k: 3 * v for k, v in params.items()}, 1)  # another step array
    term = _Reads({JOINT: rng.random(26)})
    got = project_quadrature(term, [*dirs, *other])
    assert term.reads == 2  # once for the four sharing a step, once for the other
    each = [np.sqrt(np.sum(np.square(term[JOINT] * d.step))) for d in [*dirs, *other]]
    assert got.tobytes() == np.array([float(v) for v in each]).tobytes()
    assert len(set(got[:4].tolist())) == 1 and got[4] != got[0]
