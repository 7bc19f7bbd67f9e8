"""``crosscheck.testing.assert_gradients_close``: passes quietly, fails with the CLI's message."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from paths import ROOT

import crosscheck
from crosscheck._cli.main import main
from crosscheck.testing import assert_gradients_close

sys.path.insert(0, str(ROOT))  # the repository's examples/

WORKLOAD = crosscheck.Workload(
    name="quadratic",
    parameters={"w": (3, 2)},
    inputs={"x": (5, 3)},
    reference=lambda p, i: float(np.sum((i["x"] @ p["w"]) ** 2)),
)


def grad(params, inputs):
    """The right gradient of WORKLOAD's loss, by hand."""
    return {"w": 2 * inputs["x"].T @ (inputs["x"] @ params["w"])}


def half_grad(params, inputs):
    """A planted bug: half the gradient (a mean where the loss has a sum, say)."""
    return {"w": grad(params, inputs)["w"] / 2}


def stack_grad(weights, x):
    """A hand-written gradient of the ReLU stack."""
    ys = [x]
    for w in weights:
        ys.append(np.maximum(ys[-1] @ w, 0))
    g, out = 2 * ys[-1], np.empty_like(weights)
    for k in reversed(range(len(weights))):
        g = g * (ys[k + 1] > 0)
        out[k] = ys[k].T @ g
        g = g @ weights[k].T
    return out


def test_a_passing_check_returns_the_report():
    report = assert_gradients_close(WORKLOAD, backends=[grad], dtype="float64", seed=2)
    assert report.passed
    assert report.case["workload"] == "quadratic"


@pytest.mark.parametrize(
    "target",
    [crosscheck.Case(layers=2, dim=3, batch=2, seed=1), None],
    ids=["case", "keywords"],
)
def test_stack_cases_by_case_or_keywords(target):
    options = {} if target is not None else {"layers": 2, "dim": 3, "batch": 2, "seed": 1}
    assert assert_gradients_close(target, backends=[stack_grad], **options).passed


def test_the_helper_runs_the_request_run_builds(monkeypatch):
    # A Request handed to execute by the helper itself (run would call its own), the one run builds of
    # the same keywords.
    from types import SimpleNamespace

    from crosscheck._engine import execute
    from crosscheck._engine.request import Request

    built, passed = [], SimpleNamespace(passed=True)
    monkeypatch.setattr(execute, "execute", lambda request: built.append(request) or passed)
    case = crosscheck.Case(layers=2, dim=3, batch=2, seed=1)
    assert assert_gradients_close(case, backends=[stack_grad], rtol=1e-6, atol=1e-9) is passed
    options = {"layers": 2, "batch": 2, "dim": 3}
    slack = crosscheck.Slack(rtol=1e-6, atol=1e-9)
    assert built == [Request(workload_options=options, backends=[stack_grad], seed=1, slack=slack)]


def test_a_keyword_run_does_not_take_is_refused_as_run_refuses_it():
    with pytest.raises(TypeError, match=r"^run\(\) got an unexpected keyword argument 'layer'$"):
        assert_gradients_close(layer=2)
    with pytest.raises(TypeError, match=r"^run\(\) got an unexpected keyword argument 'layer'$"):
        crosscheck.run(layer=2)


def test_a_case_and_the_same_keyword_is_an_error():
    with pytest.raises(TypeError, match="`dim` is given twice"):
        assert_gradients_close(crosscheck.Case(dim=3), dim=4)


def test_a_failure_carries_the_cli_message(tmp_path, monkeypatch, capsys):
    with pytest.raises(AssertionError) as excinfo:
        assert_gradients_close(WORKLOAD, backends=[half_grad], seed=5)
    message = str(excinfo.value)
    verdict, _, detail = message.partition("\n")  # the verdict first: what pytest's summary shows
    assert verdict == "FAILED: `half_grad` disagrees with `numpy-fd` at parameter `w`"
    assert detail.startswith("half_grad vs numpy-fd, parameter `w`\nMismatched elements: 6 / 6 (100.0%)")
    # The same text the command line prints after its table (which may wrap long lines).
    (tmp_path / "testing_module.py").write_text(_module_source())
    monkeypatch.chdir(tmp_path)
    status = main(
        [
            "run",
            "--workload",
            "testing_module:WORKLOAD",
            "--backend",
            "testing_module:half_grad",
            "--seed",
            "5",
        ]
    )
    out = capsys.readouterr().out
    assert status == 1
    printed = out[out.index("half_grad vs numpy-fd") :]
    assert " ".join(printed.split()) == " ".join((detail + "\n" + verdict).split())


def test_pytest_hides_the_helper_frame():
    with pytest.raises(AssertionError) as excinfo:
        assert_gradients_close(WORKLOAD, backends=[half_grad])
    # pytest drops frames whose locals set __tracebackhide__; what is left ends at the caller's line.
    shown = excinfo.traceback.filter(excinfo)
    assert shown[-1].frame.code.name == "test_pytest_hides_the_helper_frame"
    assert all(Path(entry.path).name != "testing.py" for entry in shown)
    assert any(Path(entry.path).name == "testing.py" for entry in excinfo.traceback)  # it was there


def _module_source() -> str:
    import inspect

    return (
        "import numpy as np\nimport crosscheck\n\n"
        + "WORKLOAD = crosscheck.Workload(\n"
        + '    name="quadratic",\n    parameters={"w": (3, 2)},\n    inputs={"x": (5, 3)},\n'
        + '    reference=lambda p, i: float(np.sum((i["x"] @ p["w"]) ** 2)),\n)\n\n\n'
        + inspect.getsource(grad)
        + "\n\n"
        + inspect.getsource(half_grad)
    )


def test_a_port_failing_only_its_running_statistics_is_named_at_their_module():
    """The planted Flax `momentum=0.1` (PyTorch's convention): every module's output and gradient agree,
    so the message's first line names the module whose running statistics differ first."""
    for needed in ("flax", "torch"):
        pytest.importorskip(needed)
    with pytest.raises(AssertionError) as excinfo:
        assert_gradients_close("examples.port.unet:train_momentum", reference="torch", backends=["jax"])
    verdict = str(excinfo.value).partition("\n")[0]
    assert verdict.startswith(
        "FAILED: `jax`: the running statistics differ first at `bn` (`bn.running_mean`"
    ), verdict
