"""The driver: references other than the oracle, backends in another precision, misbehaving references."""

from __future__ import annotations

import numpy as np
import planted
import pytest

import crosscheck
from crosscheck._cli.main import main


def test_oracle_as_a_candidate_of_a_float32_case_is_judged_in_float64():
    report = crosscheck.run(layers=3, dim=4, batch=3, backends=["numpy-fd"], reference=planted.correct)
    (comparison,) = report.comparisons
    assert report.passed, comparison.message
    assert report.backends["numpy-fd"].dtype == "float64"


def test_another_backend_as_reference_catches_a_bug():
    report = crosscheck.run(
        layers=3, dim=4, batch=3, backends=[planted.mean_not_sum], reference=planted.correct
    )
    assert not report.passed
    assert report.comparisons[0].mismatched > 0


class _Vandal:
    """A reference that writes into its inputs."""

    name = "vandal"

    def grad(self, weights, x):
        g = planted.correct(weights, x)
        weights *= 2
        return g


def test_reference_that_modifies_inputs_fails_and_inputs_are_restored():
    weights, x = crosscheck.make_inputs(crosscheck.Case(layers=2, dim=3, batch=2))
    before = weights.copy()
    report = crosscheck.run(weights=weights, x=x, backends=[planted.correct], reference=_Vandal())
    assert not report.passed
    assert "modified its inputs" in report.backends["vandal"].error
    np.testing.assert_array_equal(weights, before)
    assert report.backends["correct"].status == "skipped"


def test_json_to_a_missing_folder_is_a_usage_error_before_any_work(capsys, tmp_path):
    assert main(["run", "--json", str(tmp_path / "no" / "r.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"crosscheck: error: cannot write `--json` {tmp_path / 'no' / 'r.json'}: its folder does not exist."
    ]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_report_records_case_and_backend_metadata(dtype):
    report = crosscheck.run(layers=2, dim=3, batch=2, dtype=dtype, backends=[planted.correct])
    data = report.to_dict()
    assert data["case"] == crosscheck.Case(layers=2, dim=3, batch=2, dtype=dtype).to_dict()
    assert data["backends"]["numpy-fd"]["role"] == "reference"
    assert data["backends"]["correct"]["dtype"] == dtype
    assert data["comparisons"][0]["decided_by"] in ("rounding", "reference", "floor", "kinks", "slack")


@pytest.mark.parametrize("mode", ["full", "screen"])
def test_screening_and_full_mode_agree_on_verdicts(mode):
    bugs = [planted.transposed, planted.no_last_relu, planted.off_at_largest(1e-3)]
    report = crosscheck.run(
        layers=8, batch=8, dim=24, seed=3, oracle_mode=mode, backends=[planted.correct, *bugs]
    )
    verdicts = {c.backend: c.passed for c in report.comparisons}
    assert verdicts == {
        "correct": True,
        "transposed": False,
        "no_last_relu": False,
        "off_by_0.001_at_largest": False,
    }


def test_screening_checks_only_failing_layers_entry_by_entry():
    def off_in_layer_5(weights, x):
        g = planted.correct(weights, x)
        g[5] *= 1.01
        return g

    report = crosscheck.run(
        layers=8, batch=8, dim=24, seed=3, oracle_mode="screen", backends=[off_in_layer_5]
    )
    (comparison,) = report.comparisons
    assert not comparison.passed
    assert [s["layer"] for s in comparison.screening if s["full_check"]] == [5]
    # The one layer checked entry by entry, and the 8 largest entries of each other layer, spot-checked.
    assert comparison.judged == 24 * 24 + 7 * 8
    assert "layers checked entry by entry: [5]; spot-checked: 56 entries" in comparison.coverage
    assert comparison.coverage.startswith("screened: 8 layers x 4 random directions")
    assert comparison.message.splitlines()[1].startswith("Mismatched elements: ")


def test_auto_mode_screens_only_when_every_entry_is_costly(monkeypatch):
    from crosscheck._workloads.stack.judge import cost

    small = crosscheck.run(layers=3, dim=4, batch=2, backends=[planted.correct])
    assert small.comparisons[0].coverage == "every entry"
    assert small.backends["numpy-fd"].notes["mode"] == "full"
    monkeypatch.setattr(cost, "SCREEN_FLOPS", 1.0)
    outputs = crosscheck.run(layers=3, dim=4, batch=2, backends=[planted.correct])
    assert outputs.comparisons[0].coverage == "every entry"
    assert outputs.backends["numpy-fd"].notes["mode"] == "outputs"
    monkeypatch.setattr(cost, "OUTPUTS_FLOPS", 1.0)
    screened = crosscheck.run(layers=3, dim=4, batch=2, backends=[planted.correct])
    assert screened.comparisons[0].coverage.startswith("screened")
    assert cost.full_oracle_flops(8, 32, 64) < 1.5e11 < cost.full_oracle_flops(8, 8, 128)


def test_screen_mode_needs_an_oracle_reference():
    with pytest.raises(ValueError, match="needs a reference that can screen"):
        crosscheck.run(
            layers=2, dim=2, oracle_mode="screen", reference=planted.correct, backends=[planted.correct]
        )


def test_progress_bar_appears_only_for_long_work(monkeypatch):
    from crosscheck._cli import terminal as _cli

    clock = iter([0.0, 0.1, 0.2, 0.3, 10.0, 10.1, 10.2])
    display = _cli.progress_display()
    update = display.__enter__()
    monkeypatch.setattr(display, "_time", lambda: next(clock))
    display.terminal = True  # as on a terminal
    update("fast", 0, 100)
    update("fast", 90, 100)  # 90% in 0.1 s: ~0.01 s to go, no bar
    assert "fast" not in display._tasks
    update("slow", 0, 100)
    update("slow", 1, 100)  # 1% in 9.7 s: minutes to go, a bar
    assert "slow" in display._tasks
    update("slow", 50, 100)
    assert display._bar.tasks[0].completed == 50
    display.__exit__(None, None, None)


def test_no_progress_bar_and_no_empty_line_outside_a_terminal(monkeypatch, capsys):
    # A --quiet run piped or logged printed an empty line on stderr: the "transient" bar's stop.
    from crosscheck._cli import terminal as _cli

    clock = iter([0.0, 0.1, 10.0, 10.1])
    display = _cli.progress_display()
    update = display.__enter__()
    monkeypatch.setattr(display, "_time", lambda: next(clock))
    assert not display.terminal  # pytest captures stderr
    update("slow", 0, 100)
    update("slow", 1, 100)  # minutes to go: a bar on a terminal, nothing here
    display.__exit__(None, None, None)
    assert display._tasks == {}
    assert capsys.readouterr().err == ""


def test_a_backend_returning_a_ragged_list_is_a_failed_backend_not_a_crash():
    def ragged(weights, x):
        return [[1.0], [1.0, 2.0]]

    report = crosscheck.run(layers=2, dim=2, batch=1, backends=[ragged])
    assert not report.passed
    assert report.backends["ragged"].status == "failed"
    assert "not an array" in report.backends["ragged"].error
