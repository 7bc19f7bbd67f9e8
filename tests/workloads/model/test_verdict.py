"""A workload's report says only what was checked: each verdict line names the comparison behind it
(candidate vs reference, and what it was compared with), and a question nobody answered is "not
checked", never "right". The wording, per reference (the oracle, `torch`, `jax`) and per kind of
workload (with a NumPy reference, without one, a port), on small models of our own."""

from __future__ import annotations

import dataclasses
import importlib.util
import io

import numpy as np
import pytest

import crosscheck
from crosscheck._compare.record import Comparison
from crosscheck._report import table
from crosscheck._workloads.model.findings import Findings, Record
from crosscheck._workloads.model.oracle.function import Differencing
from crosscheck._workloads.model.rounding import Rounding
from crosscheck._workloads.model.verdict import clauses, plural, verdict

needs_frameworks = pytest.mark.skipif(
    importlib.util.find_spec("jax") is None or importlib.util.find_spec("torch") is None,
    reason="the small models need jax and torch",
)

# -- the root cause: a missing estimate agrees with nothing ------------------------------------------------


def _record(name: str, reference: str, question: str, against: str, *, passed: bool = True) -> Record:
    found = Comparison(
        backend=name,
        reference=reference,
        passed=passed,
        status="ok" if passed else "mismatch",
        total=6,
        parameter="w",
        question=question,
        against=against,
        mismatched=0 if passed else 6,
    )
    record = Record(name, {"w": np.zeros((3, 2))}, Rounding({"w": np.zeros((3, 2))}, None, "measured"))
    record.comparisons.append(found)
    return record


def _findings(*, oracle: bool) -> Findings:
    return Findings(
        Differencing("full", "small", [], 0),
        "each implementation's own float64 loss",
        {"w": (3, 2)},
        oracle=oracle,
    )


def test_with_no_oracle_a_missing_estimate_is_not_a_right_derivative():
    # The candidate's own loss was never differenced (None) and there is no anchor (None): before,
    # the two compared equal and the verdict said "derivative right".
    findings = _findings(oracle=False)
    record = _record("jax", "torch", "same function", "`torch`'s gradient")
    assert record.own is None and findings.anchor is None
    assert verdict(findings, record) == (
        "`jax`: same function as `torch` (`jax` vs `torch`: `torch`'s gradient); derivative not checked: "
        "no oracle ran (`--reference torch`)"
    )
    derivative = clauses(findings, record)["derivative"]
    assert (derivative.checked, derivative.passed, derivative.comparison) == (False, None, "")


def test_with_the_oracle_an_own_loss_never_differenced_is_not_checked():
    findings = _findings(oracle=True)
    record = _record("jax", "numpy-fd", "derivative", "differences of `jax`'s own float64 loss")
    assert verdict(findings, record) == "`jax`: derivative not checked: its own loss was not differenced"


def test_a_deep_model_s_verdict_names_a_few_parameters_and_counts_the_rest():
    findings = _findings(oracle=False)
    record = _record("jax", "torch", "same function", "`torch`'s gradient", passed=False)
    first = record.comparisons[0]
    record.comparisons[:] = [dataclasses.replace(first, parameter=f"h.{i}.w") for i in range(200)]
    assert verdict(findings, record) == (
        "`jax`: its gradient differs from `torch`'s at parameters `h.0.w`, `h.1.w`, `h.2.w` and 197 more "
        "(`jax` vs `torch`: `torch`'s gradient); derivative not checked: no oracle ran "
        "(`--reference torch`), so which of the two is wrong is unknown"
    )


@pytest.mark.parametrize(
    ("count", "named"),
    [
        (1, "parameter `p0`"),
        (4, "parameters `p0`, `p1`, `p2`, `p3`"),
        (5, "parameters `p0`, `p1`, `p2` and 2 more"),
    ],
    ids=["one", "four", "five"],
)
def test_plural_lists_at_most_four_names(count, named):
    assert plural([f"`p{i}`" for i in range(count)] * 2) == named


# -- the table: reference x kind of workload ---------------------------------------------------------------


def _np_loss(p, i):
    return float(np.sum(np.tanh(i["x"] @ p["w"] + p["b"]) * i["r"]))


def _jax_loss(p, i, scale=1.0):
    import jax
    import jax.numpy as jnp

    w = p["w"]
    if scale != 1.0:  # a custom derivative scaled by `scale`: forward right, derivative wrong
        scaled = jax.custom_jvp(lambda w: w)
        scaled.defjvp(lambda primals, tangents: (primals[0], tangents[0] * scale))
        w = scaled(w)
    return jnp.sum(jnp.tanh(i["x"] @ w + p["b"]) * i["r"])


def _torch_loss(p, i):
    import torch

    return torch.sum(torch.tanh(i["x"] @ p["w"] + p["b"]) * i["r"])


def _workload(*, numpy: bool, bug: bool = False) -> crosscheck.Workload:
    return crosscheck.Workload(
        name="tiny",
        parameters={"w": (3, 2), "b": (2,)},
        inputs={"x": (4, 3), "r": (4, 2)},
        reference=_np_loss if numpy else None,
        implementations={
            "torch": _torch_loss,
            "jax": (lambda p, i: _jax_loss(p, i, 1.5)) if bug else _jax_loss,
        },
    )


def _port() -> crosscheck.Port:
    import jax.numpy as jnp
    import torch

    class Tiny(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(3, 2)

        def forward(self, x):
            return torch.tanh(self.fc(x))

    torch.manual_seed(0)
    tree = {"fc": {"w": np.zeros((3, 2)), "b": np.zeros(2)}}
    return crosscheck.Port(
        name="tiny-port",
        torch=Tiny().eval(),
        jax=lambda params, x: jnp.tanh(x @ params["fc"]["w"] + params["fc"]["b"]),
        jax_params=tree,
        inputs={"x": np.random.default_rng(0).standard_normal((4, 3))},
    )


KINDS = {
    "numpy-reference": lambda: _workload(numpy=True),
    "own-losses": lambda: _workload(numpy=False),
    "port": _port,
    "bug-own-losses": lambda: _workload(numpy=False, bug=True),
}


def _same(name: str, ref: str, other: str, against: str, losses: bool = True) -> str:
    tail = "; the float64 losses agree" if losses else ""
    return f"same function as {other} (`{name}` vs `{ref}`: {against}{tail})"


def _right(name: str) -> str:
    return f"derivative right (`{name}` vs `numpy-fd`: differences of `{name}`'s own float64 loss)"


def _backend(name: str, ref: str) -> str:
    return (
        f"`{name}`: same function as `{ref}` (`{name}` vs `{ref}`: `{ref}`'s gradient); derivative not "
        f"checked: no oracle ran (`--reference {ref}`)"
    )


NUMPY = "differences of the NumPy reference"
TORCH_LOSS = "differences of `torch`'s own float64 loss"
OWN_TITLE = (
    "the oracle differentiates each implementation's own float64 loss (the workload has no NumPy reference)"
)
OUTPUT_ONLY = (
    "the output and every gradient agree (only the output is compared: module by module needs Flax linen "
    "or nnx, or the modules listed in `jax_intermediates`)"
)
#: How a float32 pass's verdict begins to say what it cannot see.
FLOAT32 = "agrees in float32, within its rounding (measured: a median "
WRONG = "derivative wrong at parameter `w` (`jax` vs `numpy-fd`: differences of `jax`'s own float64 loss)"

#: (kind, reference) -> (passed, the verdict lines, the title's second line or None, the port's verdict).
TABLE = {
    ("numpy-reference", "numpy-fd"): (
        True,
        [
            f"`torch`: {_same('torch', 'numpy-fd', 'the NumPy reference', NUMPY)}; {_right('torch')}",
            f"`jax`: {_same('jax', 'numpy-fd', 'the NumPy reference', NUMPY)}; {_right('jax')}",
        ],
        None,
        None,
    ),
    ("own-losses", "numpy-fd"): (
        True,
        [
            f"`torch`: {_right('torch')}",
            f"`jax`: {_same('jax', 'numpy-fd', '`torch`', TORCH_LOSS)}; {_right('jax')}",
        ],
        OWN_TITLE,
        None,
    ),
    ("port", "numpy-fd"): (
        True,
        [
            f"`torch`: {_right('torch')}",
            f"`jax`: {_same('jax', 'numpy-fd', '`torch`', TORCH_LOSS)}; {_right('jax')}",
        ],
        OWN_TITLE,
        f"{OUTPUT_ONLY} (`jax` vs `torch`: module outputs; `jax` vs `numpy-fd`: gradients)",
    ),
    ("bug-own-losses", "numpy-fd"): (
        False,
        [
            f"`torch`: {_right('torch')}",
            f"`jax`: {WRONG}; same function as `torch` (`jax` vs `numpy-fd`: {TORCH_LOSS}; the float64 "
            "losses agree; the gradients differ only where its derivative is wrong)",
        ],
        OWN_TITLE,
        None,
    ),
    **{
        (kind, ref): (
            True,
            [_backend({"torch": "jax", "jax": "torch"}[ref], ref)],
            f"no oracle ran: each candidate's gradient is compared with `{ref}`'s; no derivative is checked "
            f"(`--reference {ref}`)",
            f"{OUTPUT_ONLY} (`jax` vs `torch`: module outputs and gradients)"
            if (kind, ref) == ("port", "torch")
            else None,
        )
        for kind in ("numpy-reference", "own-losses", "port")
        for ref in ("torch", "jax")
    },
    **{
        ("bug-own-losses", ref): (
            False,
            [
                f"`{name}`: its gradient differs from `{ref}`'s at parameter `w` (`{name}` vs `{ref}`: "
                f"`{ref}`'s gradient); derivative not checked: no oracle ran (`--reference {ref}`), so which "
                "of the two is wrong is unknown"
            ],
            f"no oracle ran: each candidate's gradient is compared with `{ref}`'s; no derivative is checked "
            f"(`--reference {ref}`)",
            None,
        )
        for ref, name in (("torch", "jax"), ("jax", "torch"))
    },
}


def _printed(report) -> str:
    from rich.console import Console

    console = Console(width=10_000, record=True, file=io.StringIO())
    report.render(console)
    return console.export_text()


@needs_frameworks
@pytest.mark.parametrize(("kind", "reference"), list(TABLE), ids=[f"{k}-{r}" for k, r in TABLE])
def test_each_verdict_line_names_its_comparison(kind, reference):
    passed, lines, title, port = TABLE[kind, reference]
    report = crosscheck.run(workload=KINDS[kind](), reference=reference, seed=0)
    assert report.passed is passed, report.problems
    assert report.oracle["verdict"] == lines
    printed = _printed(report)
    assert all(line in printed for line in lines)
    heading = table.title(report).splitlines()  # the table's title, and the plot's
    where = heading[1]  # where each side ran, then the rest
    assert where.startswith("where: ") and "`torch` on cpu (cpu)" in where and "`jax` on cpu (cpu)" in where
    assert heading[2:] == ([title] if title else [])
    assert title is None or title in " ".join(printed.split())  # the table may wrap its title
    if port is not None:  # each float32 pass also says what it cannot see (``low.text``)
        verdicts = {k: v.partition(FLOAT32)[0] for k, v in report.verdicts().items()}
        assert verdicts.pop("jax") == f"{port}; " and set(verdicts.values()) <= {""}
        assert f"verdict of `jax`: {port}; {FLOAT32}" in printed
    if reference != "numpy-fd":  # no sentence about an oracle's work, nor a derivative found right
        assert report.case["oracle_differentiates"] == "nothing: no oracle ran (the reference is a backend)"
        assert "derivative right" not in printed
        joined = " ".join(printed.split())
        assert joined.count("oracle") == joined.count("no oracle ran") > 0
        assert all(not q["derivative"]["checked"] for q in report.oracle["questions"].values())


@needs_frameworks
def test_the_json_report_adds_the_questions_and_keeps_its_keys():
    report = crosscheck.run(workload=_workload(numpy=False), reference="torch", seed=0)
    oracle = report.to_dict()["oracle"]
    for key in (
        "reference",
        "coverage",
        "verdict",
        "notes",
        "problems",
        "lines",
        "zero_in_every_implementation",
    ):
        assert key in oracle
    assert oracle["questions"] == {
        "jax": {
            "same function": {
                "checked": True,
                "passed": True,
                "comparison": "`jax` vs `torch`: `torch`'s gradient",
                "text": "same function as `torch` (`jax` vs `torch`: `torch`'s gradient)",
            },
            "derivative": {
                "checked": False,
                "passed": None,
                "comparison": "",
                "text": "derivative not checked: no oracle ran (`--reference torch`)",
            },
        }
    }


@needs_frameworks
def test_a_reference_that_failed_claims_no_oracle():
    def broken(p, i):
        raise RuntimeError("boom")

    workload = crosscheck.Workload(
        name="tiny",
        parameters={"w": (3, 2), "b": (2,)},
        inputs={"x": (4, 3), "r": (4, 2)},
        implementations={"torch": broken, "jax": _jax_loss},
    )
    report = crosscheck.run(workload=workload, reference="torch", seed=0)
    assert not report.passed
    assert report.case["oracle_differentiates"] == "nothing: the reference failed or did not run"
    printed = _printed(report)
    assert "no oracle ran: the reference `torch` failed or did not run" in printed
    assert "derivative right" not in printed
