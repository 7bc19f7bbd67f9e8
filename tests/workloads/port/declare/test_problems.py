"""A port whose declaration has several problems is refused once, with every problem: its overrides',
its mapping table's and its listed intermediates' (a wrong ``jax_intermediates`` shape no longer hides
an ambiguous mapping), one line each, before any backend, oracle or worker runs; on the command line,
exit 2, each problem on its line, no traceback."""

from __future__ import annotations

import numpy as np
import pytest

import crosscheck
from crosscheck._errors import DetailedError, Refused, UserCodeFailed
from crosscheck._workloads.port.declare.problems import Problems
from crosscheck._workloads.port.mapping import table as mapping
from crosscheck._workloads.port.mapping.matching import Tensor

X = {"x": np.random.default_rng(0).standard_normal((5, 3))}
#: The three problems of ``square_port(...)`` with every mistake, in the order the refusal says them.
OVERRIDE = "override of `fc1.bias`: no JAX leaf `fc9/b`; leaves look like `fc1/b`."
AMBIGUOUS = (
    "`fc2.weight` (4, 4) -> `fc2/w` (4, 4) is ambiguous: by name; identity and transpose both fit the "
    "shapes; decide with overrides={'fc2.weight': TRANSFORM}, TRANSFORM one of 'identity', 'transpose'"
)
SHAPE = (
    "`jax_intermediates`: `fc1` has shape (5, 2) on the JAX side; PyTorch's `fc1` (Linear) outputs (5, 4)."
)


def square_port(*, override=True, ambiguous=True, shape=True):
    """fc1 (3 -> 4), tanh, fc2 (4 -> 4) against a JAX function that lists both modules' outputs. The
    mistakes: an override naming a leaf that does not exist (``override``), no override for the square
    ``fc2`` kernel, whose layout a function does not tell (``ambiguous``), and ``fc1``'s output returned
    cut to 2 features (``shape``)."""
    pytest.importorskip("torch")
    pytest.importorskip("jax")
    import jax.numpy as jnp
    import torch

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.fc2 = torch.nn.Linear(3, 4), torch.nn.Linear(4, 4)

        def forward(self, x):
            return self.fc2(torch.tanh(self.fc1(x)))

    def fn(params, x):
        a = x @ params["fc1"]["w"] + params["fc1"]["b"]
        b = jnp.tanh(a) @ params["fc2"]["w"] + params["fc2"]["b"]
        return b, {"fc1": a[:, :2] if shape else a, "fc2": b}

    torch.manual_seed(0)
    tree = {k: {"w": np.zeros(s), "b": np.zeros(s[1])} for k, s in {"fc1": (3, 4), "fc2": (4, 4)}.items()}
    overrides = {
        **({"fc1.bias": "fc9/b"} if override else {}),
        **({} if ambiguous else {"fc2.weight": "transpose"}),
    }
    return crosscheck.Port(
        name="square", torch=Net().eval(), jax=fn, jax_params=tree, inputs=X,
        jax_intermediates=["fc1", "fc2"], overrides=overrides or None,
    )  # fmt: skip


@pytest.fixture
def no_heavy_work(monkeypatch):
    """Every step after the workload is loaded fails the test: planning (which loads the backends and
    sets up the oracle), driving the run, a worker process, the port's generic workload and its two
    sides' loss functions."""
    from crosscheck._engine import execute
    from crosscheck._engine.process import contain
    from crosscheck._workloads.port.declare import build
    from crosscheck._workloads.port.judge import workload as port_workload

    def heavy(what):
        def called(*args, **kwargs):
            raise AssertionError(f"{what} ran before the port was refused")

        return called

    monkeypatch.setattr(execute, "plan", heavy("planning (backends, oracle)"))
    monkeypatch.setattr(execute, "drive", heavy("the run"))
    monkeypatch.setattr(contain, "contained", heavy("a worker process"))
    monkeypatch.setattr(port_workload, "GenericWorkload", heavy("the generic workload"))
    monkeypatch.setattr(build, "torch_implementation", heavy("the PyTorch loss"))
    monkeypatch.setattr(build, "jax_implementation", heavy("the JAX loss"))


def test_a_mapping_problem_and_a_listing_problem_are_refused_together(no_heavy_work):
    with pytest.raises(ValueError) as raised:  # noqa: PT011 (the message is checked below, line by line)
        crosscheck.check(square_port(), reference="torch")
    lines = str(raised.value).splitlines()
    assert lines == [
        "port `square`: 3 problems, each to fix before it is checked (print(port.mapping) shows the table):",
        f"  - {OVERRIDE}",
        f"  - {SHAPE}",
        f"  - {AMBIGUOUS}",
    ]
    assert isinstance(raised.value, Refused) and raised.value.problems == (OVERRIDE, SHAPE, AMBIGUOUS)
    assert "AMBIGUOUS" in raised.value.details  # the table the command line prints, its problem rows first


def test_the_newcomers_case_a_shape_and_an_ambiguity_in_one_refusal(no_heavy_work):
    """The report that asked for this: a listed shape error hid the mapping's ambiguity, found by a
    second run."""
    with pytest.raises(Refused) as raised:
        crosscheck.check(square_port(override=False), reference="torch")
    assert raised.value.problems == (SHAPE, AMBIGUOUS)


@pytest.mark.parametrize(
    ("mistakes", "error", "said"),
    [
        ({"override": True}, ValueError, f"port `square`: {OVERRIDE}"),
        ({"shape": True}, ValueError, f"port `square`: {SHAPE}"),
        ({"ambiguous": True}, DetailedError, f"port `square`: {AMBIGUOUS}"),
    ],
    ids=["override", "shape", "ambiguous"],
)
def test_one_problem_alone_is_one_line_naming_the_port(no_heavy_work, mistakes, error, said):
    kinds = {"override": False, "ambiguous": False, "shape": False, **mistakes}
    with pytest.raises(error) as raised:
        crosscheck.check(square_port(**kinds), reference="torch")
    assert str(raised.value) == said and not isinstance(raised.value, Refused)


def test_the_mapping_of_a_port_with_every_mistake_is_refused_with_them_all():
    """``print(port.mapping)`` prepares the port: a listing or override problem refuses it there, with
    the table's problems too (the table alone is printed when it is the only thing wrong)."""
    with pytest.raises(Refused) as raised:
        print(square_port().mapping)
    assert raised.value.problems == (OVERRIDE, SHAPE, AMBIGUOUS)
    assert "AMBIGUOUS" in str(square_port(override=False, shape=False).mapping)


def test_every_bad_override_is_said_when_collected():
    torch = [Tensor(("a", "weight"), (2, 3)), Tensor(("b", "weight"), (2, 3))]
    jax = [Tensor(("params", "a", "kernel"), (3, 2), "params", skip=1)]
    jax += [Tensor(("params", "b", "kernel"), (3, 2), "params", skip=1)]
    overrides = {"a.weight": "params/x/kernel", "b.weight": "OIHW->HWIO", "c.*": "transpose"}
    with pytest.raises(ValueError, match="no JAX leaf `params/x/kernel`"):  # not collected: the first
        mapping.build(torch, jax, overrides)
    found: list[ValueError] = []
    table = mapping.build(torch, jax, overrides, found)
    assert [str(e) for e in found] == [
        "override of `a.weight`: no JAX leaf `params/x/kernel`; leaves look like `params/a/kernel`.",
        "override of `b.weight`: `OIHW->HWIO` does not apply to (2, 3) against (3, 2) of `params/b/kernel`.",
        "override `c.*` matches no PyTorch tensor; names look like `a.weight`.",
    ]
    assert [e.transform for e in table.mapped()] == ["transpose", "transpose"]  # matched as with none


def test_a_single_problem_keeps_its_type_and_one_that_names_the_port_is_itself():
    found = Problems("port `p`")
    found.add(TypeError("`x` must be an array, found list."))
    with pytest.raises(TypeError, match=r"^port `p`: `x` must be an array, found list\.$"):
        found.refuse()
    named = UserCodeFailed("port `p`: `inputs(rng, dtype)` failed: KeyError: 'x'")
    found = Problems("port `p`")
    found.add(named)
    with pytest.raises(UserCodeFailed) as raised:
        found.refuse()
    assert raised.value is named
    Problems("port `p`").refuse()  # nothing found: nothing raised


def test_several_problems_are_one_line_each_whatever_their_text():
    found = Problems("port `p`")
    found.add(ValueError("port `p`: first\nwith a newline"))
    found.add(TypeError("second\x1b[31m"))
    with pytest.raises(Refused) as raised:
        found.refuse(["third"], "TABLE")
    assert str(raised.value).splitlines() == [
        "port `p`: 3 problems, each to fix before it is checked (print(port.mapping) shows the table):",
        "  - first with a newline",
        "  - second [31m",
        "  - third",
    ]
    assert raised.value.details == "TABLE"


def test_the_command_line_says_every_problem_on_its_line(monkeypatch, capsys, tmp_path):
    from crosscheck._cli.main import main
    from crosscheck._engine.process import contain

    square_port()  # skips without torch or jax
    waits = []  # how long the parent waits for the worker to exit once it has the refusal
    close = contain._Watch.close
    monkeypatch.setattr(
        contain._Watch, "close", lambda self, wait=0.0: waits.append(wait) or close(self, wait)
    )
    # A module on disk: the port runs in a worker process, which sends the refusal back.
    (tmp_path / "square_port_module.py").write_text(
        "from tests.workloads.port.declare.test_problems import square_port\nport = square_port()\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert main(["run", "--workload", "square_port_module:port", "--reference", "torch"]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert err == [
        "crosscheck: error: port `square`: 3 problems, each to fix before it is checked "
        "(print(port.mapping) shows the table):",
        f"  - {OVERRIDE}",
        f"  - {SHAPE}",
        f"  - {AMBIGUOUS}",
    ]
    assert "Traceback" not in captured.err + captured.out
    assert waits == [0.0]  # said at once, not after the worker's PyTorch and JAX teardown
    out = captured.out.splitlines()
    assert out[0] == "the mapping has 1 problem (their rows first):"
    assert out[2].startswith("fc2.weight (4, 4)") and "AMBIGUOUS" in out[2]


def test_a_refusal_of_two_mistakes_does_the_work_of_one():
    """Two mistakes are found by the work that finds one: one PyTorch forward pass and one JAX trace
    (for the listed intermediates' shapes), nothing compiled, whichever mistakes there are (the seconds
    ``benchmarks/refusal.py`` once saw a second mistake add were the machine's load, not work)."""
    pytest.importorskip("jax")
    import jax.monitoring

    events: list[str] = []

    def listen(name, *args, **kwargs):
        events.append(name)

    jax.monitoring.register_event_duration_secs_listener(listen)
    work = {}
    try:
        for kinds in ("override", "shape", "both"):
            mistakes = {"override": kinds != "shape", "shape": kinds != "override"}
            port = square_port(ambiguous=False, **mistakes)
            passes: list[int] = []
            port.torch.register_forward_hook(lambda *a, passes=passes: passes.append(1))
            events.clear()
            with pytest.raises(ValueError, match="fc9/b" if kinds != "shape" else "has shape"):
                crosscheck.check(port, reference="torch")
            traced = events.count("/jax/core/compile/jaxpr_trace_duration")
            compiled = events.count("/jax/core/compile/backend_compile_duration")
            work[kinds] = (len(passes), traced, compiled)
    finally:
        jax.monitoring.unregister_event_duration_listener(listen)
    assert work == {"override": (1, 1, 0), "shape": (1, 1, 0), "both": (1, 1, 0)}
