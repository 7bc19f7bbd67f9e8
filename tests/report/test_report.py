"""One report for every workload: one table, one message format, JUnit, plots, bundles and replay, with
each parameter's index names; text from backends and workloads shown as text, never as markup."""

from __future__ import annotations

import ast
import dataclasses
import io
import json
import sys
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import planted
import pytest

import crosscheck
from crosscheck._cli.main import main
from crosscheck._compare.compare import compare
from crosscheck._compare.record import Tolerance
from crosscheck._engine.execute import execute
from crosscheck._engine.request import Request
from crosscheck._replay.replay import replay
from crosscheck._report.bundle import MARKER, load_bundle, save_bundle
from crosscheck._report.junit import case_name, write_junit
from crosscheck._report.report import BackendResult, Report, Section, Verdict
from crosscheck._report.table import table

#: A user's workload (an affine map: a 2-D weight and a 1-D bias) and backends for it.
WORKLOAD_MODULE = """
import numpy as np
import crosscheck

def _loss(p, i):
    return float(np.sum((i["x"] @ p["w"] + p["b"]) ** 2))

def grad(p, i):
    y = i["x"] @ p["w"] + p["b"]
    return {"w": 2 * i["x"].T @ y, "b": 2 * y.sum(axis=0)}

def half_grad(p, i):
    return {k: v / 2 for k, v in grad(p, i).items()}

_calls = [0]

def drifting(p, i):
    _calls[0] += 1
    return {k: (v * (1 + 1e-3 * _calls[0])).astype(v.dtype) for k, v in grad(p, i).items()}

workload = crosscheck.Workload(
    name="affine", parameters={"w": (3, 2), "b": (2,)}, inputs={"x": (4, 3)}, reference=_loss
)
"""


@pytest.fixture
def wlmod(tmp_path, monkeypatch):
    (tmp_path / "wlmod.py").write_text(textwrap.dedent(WORKLOAD_MODULE))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    monkeypatch.delitem(sys.modules, "wlmod", raising=False)
    return tmp_path


def _render(report: Report) -> str:
    out = io.StringIO()
    from rich.console import Console

    report.render(Console(file=out, width=200, color_system=None, force_terminal=False))
    return out.getvalue()


def _headers(report: Report) -> list[str]:
    return [str(column.header).replace("\n", " ") for column in table(report).columns]


# -- one message, one table ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("parameter", "names", "where", "worst"),
    [
        (None, ["layer", "row", "col"], "at (layer, row, col) (0, 1, 1)", "Worst entry (0, 1, 1): "),
        ("w1", None, "at parameter `w1` index (0, 1, 1)", "Worst entry `w1` (0, 1, 1): "),
        ("w", ["row", "col", "k"], "at parameter `w` (row, col, k) (0, 1, 1)", "Worst entry `w` (0, 1, 1): "),
        (None, None, "at index (0, 1, 1)", "Worst entry (0, 1, 1): "),
    ],
    ids=["stack", "workload", "named-parameter-and-axes", "neither"],
)
def test_one_message_format_from_the_index_names(parameter, names, where, worst):
    reference = np.ones((1, 2, 2))
    candidate = reference.copy()
    candidate[0, 1, 1] = 2.0
    tolerance = Tolerance({"slack": np.full(reference.shape, 1e-6)})
    c = compare(candidate, reference, tolerance, backend="b", reference_name="r", dtype="float64",
                parameter=parameter, index_names=names)  # fmt: skip
    lines = c.message.splitlines()
    assert lines[0] == "Mismatched elements: 1 / 4 (25.0%)" + (
        f" in parameter `{parameter}`" if parameter else ""
    )
    assert lines[1].endswith(where) and lines[2].endswith(where)
    assert lines[3].startswith(worst)
    assert c.to_dict()["index_names"] == names


def test_the_stack_names_its_axes_and_a_workload_parameter_does_not():
    stack = crosscheck.run(layers=2, dim=3, batch=2, backends=[planted.correct])
    assert [c.to_dict()["index_names"] for c in stack.comparisons] == [["layer", "row", "col"]]
    report = crosscheck.run(workload=crosscheck.Workload(
        name="q", parameters={"w": (3, 2)}, inputs={"x": (5, 3)},
        reference=lambda p, i: float(np.sum((i["x"] @ p["w"]) ** 2))),
        backends=[_q_grad], dtype="float64")  # fmt: skip
    assert [c.to_dict()["index_names"] for c in report.comparisons] == [None]


def _q_grad(p, i):
    return {"w": 2 * i["x"].T @ (i["x"] @ p["w"])}


def test_one_table_shows_the_parameter_column_only_when_a_comparison_names_one(wlmod):
    stack = crosscheck.run(layers=2, dim=3, batch=2, backends=[planted.correct, planted.transposed])
    assert _headers(stack) == [
        "backend", "dtype", "time", "max abs diff", "max rel diff", "worst (l,r,c)", "tolerance there",
        "decided by", "unjudgeable", "verdict",
    ]  # fmt: skip
    report = crosscheck.run(workload="wlmod:workload", backends=["wlmod:grad", "wlmod:half_grad"])
    headers = _headers(report)
    assert headers[:2] == ["backend", "parameter"] and "worst index" in headers
    out = _render(report)
    assert "FAILED: `half_grad` disagrees with `numpy-fd` at parameters `w`, `b`" in out
    assert out.count("half_grad vs numpy-fd, parameter") == 2


LONG = "encoder.layer.0.attention.output.dense.weight"


@pytest.mark.parametrize("width", [80, 132, 200], ids=["80-columns", "132-columns", "200-columns"])
def test_no_name_is_cut_short_on_a_narrow_terminal(width):
    from rich.console import Console

    def reference(p, i):
        return float(np.sum((i["x"] @ p[LONG]) ** 2))

    def grad(p, i):
        return {LONG: 2 * i["x"].T @ (i["x"] @ p[LONG])}

    def wrong(p, i):
        return {LONG: 3 * i["x"].T @ (i["x"] @ p[LONG])}

    workload = crosscheck.Workload(
        name="long", parameters={LONG: (3, 2)}, inputs={"x": (4, 3)}, reference=reference
    )
    report = crosscheck.run(workload=workload, backends=[grad, wrong])
    out = io.StringIO()
    report.render(Console(file=out, width=width, color_system=None, force_terminal=False))
    text = out.getvalue()
    assert "…" not in text
    starts = ("grad ", "wrong ", "│ grad ", "│ wrong ")
    rows = [line for line in text.splitlines() if line.startswith(starts) and " vs " not in line]
    # A table where the names fit whole, else one paragraph per row: the name whole either way.
    assert len(rows) == 2 and all(LONG in row for row in rows), text
    assert max(len(line) for line in text.splitlines()) <= width


# -- text from elsewhere is text -----------------------------------------------------------------


class _Named:
    """A backend with any name, optionally wrong (twice the gradient) or failing."""

    def __init__(self, name: str, *, wrong: bool = False, error: str | None = None) -> None:
        self.name, self.wrong, self.error = name, wrong, error

    def grad(self, weights, x):
        if self.error is not None:
            raise RuntimeError(self.error)
        return planted.correct(weights, x) * (2 if self.wrong else 1)


def test_markup_and_control_characters_in_names_and_errors_are_shown_as_text(tmp_path):
    backends = [
        _Named("[/]evil[bold]", wrong=True),
        _Named("ctl\x1b[31m\x07name", wrong=True),
        _Named("[red]broken", error="boom [/] \x1b[2J\x00 done"),
    ]
    report = crosscheck.run(layers=2, dim=4, batch=4, seed=1, backends=backends)
    out = _render(report)  # rich.errors.MarkupError before
    assert "[/]evil[bold]" in out  # the table, the heading, the FAILED line
    assert out.count("[/]evil[bold]") >= 3
    assert "[red]broken" in out
    assert "\x1b" not in out and "\x07" not in out and "\x00" not in out
    assert not any(ch in line for line in report.problems for ch in "\x1b\x07\x00")
    path = tmp_path / "r.xml"
    write_junit([(case_name(report), report)], path)
    names = {case.get("name") for case in ET.parse(path).getroot().iter("testcase")}
    assert "[/]evil[bold] vs numpy-fd" in names and "ctl [31m name vs numpy-fd" in names


def test_junit_is_valid_xml_whatever_a_backend_says(tmp_path):
    report = Report(
        case={"workload": "w\x00", "dtype": "float32", "seed": 0},
        backends={
            "numpy-fd": BackendResult("numpy-fd", "ok", role="reference"),
            "bad\x01": BackendResult("bad\x01", "failed", error="Error: \x1b[31m\x0b\x00\ud800 boom"),
        },
        comparisons=[],
        reference="numpy-fd",
    )
    path = tmp_path / "r.xml"
    write_junit([(case_name(report), report)], path)
    root = ET.parse(path).getroot()  # a control character would make this raise
    (error,) = root.iter("error")
    assert error.get("message") == "bad : failed: Error: [31m boom"
    assert root.find("testsuite").get("name") == "workload w float32 seed=0"
    assert "[31m" in _render(report)


def test_a_workload_parameter_named_like_markup_is_text():
    report = crosscheck.run(workload=crosscheck.Workload(
        name="[b]q", parameters={"[/]w": (3, 2)}, inputs={"x": (5, 3)},
        reference=lambda p, i: float(np.sum((i["x"] @ p["[/]w"]) ** 2))),
        backends=[_half_q], dtype="float64")  # fmt: skip
    out = _render(report)
    assert "parameter `[/]w`" in out and "workload=[b]q" in out


def _half_q(p, i):
    return {"[/]w": (i["x"].T @ (i["x"] @ p["[/]w"]))}


# -- plots ---------------------------------------------------------------------------------------


def test_a_workload_plot_draws_its_2d_parameters_and_leaves_out_1d_ones(wlmod, capsys):
    pytest.importorskip("matplotlib")
    from matplotlib.image import imread

    from crosscheck._report.plot import axis_names, plottable, write_plot

    # As --plot asks (the run is contained: the request carries it to the worker).
    backends = ["wlmod:grad", "wlmod:half_grad"]
    report = execute(Request(workload="wlmod:workload", backends=backends, plot=True))
    shown, left_out = plottable(report)
    assert [(c.backend, c.parameter) for c in shown] == [("grad", "w"), ("half_grad", "w")]
    assert {c.parameter for c in left_out} == {"b"}
    assert axis_names(shown[0]) == ["axis 0", "axis 1"]
    path = wlmod / "p.png"
    assert write_plot(report, path) == 2
    image = imread(path)[..., :3]
    red = (image[..., 0] > image[..., 2] + 0.2) & (image[..., 1] < 0.2)  # the deep red of 1e4 and more
    assert red.sum() > 5000  # half_grad's w: every entry off (more than the colour bar's red end)
    status = main(["run", "--workload", "wlmod:workload", "--backend", "wlmod:grad", "--quiet",
                   "--plot", str(wlmod / "q.png")])  # fmt: skip
    assert status == 0 and (wlmod / "q.png").stat().st_size > 10_000
    assert "parameters of one axis have no image: b" in capsys.readouterr().err


def test_a_plot_of_only_1d_parameters_writes_nothing(tmp_path):
    pytest.importorskip("matplotlib")
    from crosscheck._report.plot import write_plot

    report = execute(Request(workload=crosscheck.Workload(
        name="v", parameters={"b": (3,)}, inputs={"x": (3,)},
        reference=lambda p, i: float(np.sum((p["b"] * i["x"]) ** 2))),
        backends=[lambda p, i: {"b": 2 * p["b"] * i["x"] ** 2}], dtype="float64", plot=True))  # fmt: skip
    assert write_plot(report, tmp_path / "p.png") == 0
    assert not (tmp_path / "p.png").exists()


# -- bundles and replay --------------------------------------------------------------------------


def test_a_workload_bundle_round_trips_and_replays_bit_for_bit(wlmod, capsys):
    args = ["run", "--workload", "wlmod:workload", "--backend", "wlmod:grad", "--backend", "wlmod:half_grad"]
    assert main([*args, "--quiet", "--save-bundle", str(wlmod / "b.npz")]) == 1
    bundle = load_bundle(wlmod / "b.npz")
    assert bundle["workload"] == "wlmod:workload" and bundle["meta"]["version"] == 2
    assert set(bundle["params"]) == {"w", "b"} and set(bundle["inputs"]) == {"x"}
    assert set(bundle["gradients"]) == {"numpy-fd", "grad", "half_grad"}
    assert all(set(value) == {"w", "b"} for value in bundle["gradients"].values())
    assert bundle["params"]["w"].dtype == np.float32
    rows = replay(bundle, trust=True)
    assert [(row["backend"], row["status"]) for row in rows] == [
        ("numpy-fd", "bit for bit"), ("grad", "bit for bit"), ("half_grad", "bit for bit")
    ]  # fmt: skip
    capsys.readouterr()
    assert main(["replay", str(wlmod / "b.npz"), "--trust"]) == 0
    assert "REPRODUCED bit for bit" in capsys.readouterr().out


def test_replay_of_a_workload_notices_a_backend_that_changes(wlmod):
    # In process: the drifting backend's call count lives here, so the replay's call is its second.
    report = crosscheck.run(workload="wlmod:workload", backends=["wlmod:drifting"], repeat=1, isolate=False)
    save_bundle(report, wlmod / "b.npz", workload="wlmod:workload")
    rows = {row["backend"]: row for row in replay(load_bundle(wlmod / "b.npz"), trust=True, isolate=False)}
    assert rows["drifting"]["status"] == "differs" and rows["drifting"]["detail"].startswith("`w`: ")


def test_a_bundle_of_an_unloadable_workload_says_so(wlmod):
    report = crosscheck.run(workload="wlmod:workload", backends=["wlmod:grad"])
    save_bundle(report, wlmod / "b.npz", workload="wlmod:nothing_here")
    rows = replay(load_bundle(wlmod / "b.npz"), trust=True)
    assert all(
        "not replayable: workload `wlmod:nothing_here` cannot be loaded again" in r["status"] for r in rows
    )


def test_a_version_1_stack_bundle_still_loads_and_replays(tmp_path):
    report = crosscheck.run(layers=2, dim=3, batch=2, backends=["numpy-fd"])
    names = list(report.gradients)
    meta = {"format": MARKER, "version": 1, "gradients": names, "report": report.to_dict()}
    params, inputs = report.inputs
    arrays = {f"gradient_{i}": report.gradients[name]["weights"] for i, name in enumerate(names)}
    with open(tmp_path / "v1.npz", "wb") as file:
        np.savez_compressed(
            file, weights=params["weights"], x=inputs["x"], meta=np.array(json.dumps(meta)), **arrays
        )
    bundle = load_bundle(tmp_path / "v1.npz")
    assert bundle["workload"] == "stack" and set(bundle["params"]) == {"weights"}
    assert [row["status"] for row in replay(bundle)] == ["bit for bit", "bit for bit"]


def test_a_bundle_whose_arrays_are_not_its_case_is_refused(tmp_path):
    weights, x = np.ones((2, 3, 3), np.float32), np.ones((2, 3), np.float32)
    report = crosscheck.run(weights=weights, x=x, backends=[planted.correct])
    tampered = dataclasses.replace(report, inputs=({"weights": weights * 2}, {"x": x}))
    save_bundle(tampered, tmp_path / "b.npz")
    with pytest.raises(ValueError, match="its `weights` array is not the one its case records"):
        load_bundle(tmp_path / "b.npz")


# -- what a workload adds, through its judge ---------------------------------------------------------


def _printed_by(name: str):
    def render(report: Report, console) -> None:
        console.print(f"{name} of {len(report.comparisons)} comparisons", highlight=False, markup=False)

    return render


def test_a_judge_hands_sections_and_verdicts_and_the_report_prints_them_in_place():
    report = Report(
        case={"workload": "fake", "dtype": "float64", "seed": 0},
        backends={
            "numpy-fd": BackendResult("numpy-fd", "ok", role="reference"),
            "mine": BackendResult("mine", "ok", verdict=Verdict("it differs first at `block.1`", fails=True)),
            "other": BackendResult("other", "ok", verdict=Verdict("every block agrees")),
        },
        comparisons=[],
        reference="numpy-fd",
        sections=(
            Section(_printed_by("after"), place="after"),
            Section(_printed_by("before"), place="before"),
        ),
    )
    out = _render(report)
    assert out.index("before of 0 comparisons") < out.index("numpy-fd") < out.index("after of 0 comparisons")
    assert "verdict of `mine`: it differs first at `block.1`" in out
    assert "verdict of `other`: every block agrees" in out
    assert report.verdicts() == {"mine": "it differs first at `block.1`", "other": "every block agrees"}
    assert "`mine`: it differs first at `block.1`" in report.problems
    assert not any(line.startswith("`other`") for line in report.problems)
    assert all("verdict" not in record for record in report.to_dict()["backends"].values())


def test_a_section_says_where_it_goes():
    with pytest.raises(ValueError, match="`place` must be one of before, after; found 'middle'"):
        Section(_printed_by("x"), place="middle")


def test_the_stack_hands_its_layer_table_only_with_explain():
    plain = crosscheck.run(layers=2, dim=3, batch=2, backends=[planted.correct])
    assert plain.sections == () and "layer by layer" not in _render(plain)
    explained = crosscheck.run(layers=2, dim=3, batch=2, backends=[planted.correct], explain=True)
    assert len(explained.sections) == 1
    assert "layer by layer" in _render(explained)


def test_comparison_and_reports_import_no_workload():
    root = Path(crosscheck.__file__).parent
    above = ("crosscheck._workloads", "crosscheck._engine", "crosscheck._cli", "crosscheck._sweep")
    above += ("crosscheck._evidence", "crosscheck.backends")
    found = []
    for path in sorted([*(root / "_compare").rglob("*.py"), *(root / "_report").rglob("*.py")]):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            names += [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            found += [f"{path.name}: {n}" for n in names if n.startswith(above)]
    assert found == []


def test_the_json_report_is_streamed_to_its_file_never_one_string(tmp_path, monkeypatch):
    """``crosscheck run --json`` and ``Report.write_json`` encode as they write (issue 38): the same
    text as ``json.dumps`` of ``to_dict``, with no call that returns the whole text."""
    report = crosscheck.run(workload="stack", backends=["numpy-fd"], layers=2, dim=3, batch=2, seed=1)
    expected = json.dumps(report.to_dict(), indent=2) + "\n"

    def whole(*args, **kwargs):
        raise AssertionError("the JSON report was made as one string")

    monkeypatch.setattr(json, "dumps", whole)
    report.write_json(tmp_path / "api.json")
    assert (tmp_path / "api.json").read_text() == expected
    status = main(
        [
            "run",
            "--layers",
            "2",
            "--dim",
            "3",
            "--batch",
            "2",
            "--seed",
            "1",
            "--json",
            str(tmp_path / "cli.json"),
        ]
    )
    assert status == 0
    assert json.loads((tmp_path / "cli.json").read_text())["passed"] is True


def test_a_parameter_with_every_entry_unjudgeable_says_why_in_the_failed_line():
    # A convert= port's FAILED line named `q_proj.weight` unjudgeable without the oracle's reason.
    from crosscheck._compare.record import Comparison

    unjudged = Comparison(
        backend="jax",
        reference="numpy-fd",
        passed=False,
        status="unjudgeable",
        total=16,
        parameter="layers.0.self_attn.q_proj.weight",
        unjudgeable=16,
        unjudgeable_reasons={"finite differences do not converge": 16},
    )
    report = Report(
        case={"workload": "w", "dtype": "float32", "seed": 0},
        backends={"numpy-fd": BackendResult("numpy-fd", "ok", role="reference")},
        comparisons=[unjudged],
        reference="numpy-fd",
    )
    assert (
        "`jax`: every entry of parameter `layers.0.self_attn.q_proj.weight` is unjudgeable "
        "(16 finite differences do not converge)"
    ) in report.problems
