"""Where the JAX side runs and at what matmul precision: the run's choice (``Execution.jax_platform``,
``jax_precision``; ``--jax-platform``, ``--jax-precision``; ``[tool.crosscheck]``) is in effect inside
each of the JAX side's calls, in process, under a timeout (a thread of its own) and in a worker process,
restored after each and never noted as the backend's change; the report, the JSON and the bundle say
where each side ran; a replay applies the recorded settings again."""

from __future__ import annotations

import json
import os

import numpy as np
import probe
import pytest
from paths import SUPPORT

import crosscheck
from crosscheck._backends import placements
from crosscheck._cli.main import main
from crosscheck._engine.load import info_where
from crosscheck._replay.replay import replay, reproduced
from crosscheck._report.bundle import load_bundle, save_bundle
from crosscheck._report.table import title

jax = pytest.importorskip("jax")

TINY = {"layers": 1, "dim": 2, "batch": 2, "repeat": 1}
PROBE = "probe:jax_settings_grad"
SETTINGS = [("default", "default"), ("default", "highest"), ("cpu", "default"), ("cpu", "high")]


@pytest.fixture
def workers_find_the_probe(monkeypatch):
    """A worker process imports ``probe`` as this process does (``tests/support`` on its path)."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(SUPPORT), os.environ.get("PYTHONPATH", "")]))


def _probed(report: crosscheck.Report) -> float:
    values = {float(v) for v in np.ravel(report.gradients["jax_settings_grad"]["weights"])}
    assert len(values) == 1, values
    return values.pop()


def _jax_untouched() -> None:
    assert jax.config.jax_default_matmul_precision is None
    assert jax.config.jax_default_device is None


@pytest.mark.parametrize("how", ["in-process", "timeout", "isolated"])
@pytest.mark.parametrize(("platform", "precision"), SETTINGS, ids=["-".join(s) for s in SETTINGS])
def test_the_chosen_settings_are_in_effect_inside_the_call_and_restored_after(
    how, platform, precision, workers_find_the_probe
):
    report = crosscheck.run(
        **TINY,
        backends=[PROBE],
        jax_platform=platform,
        jax_precision=precision,
        isolate=how == "isolated",
        timeout=60 if how == "timeout" else None,
    )
    assert _probed(report) == probe.code(platform, precision)
    assert "state_changed" not in report.backends["jax_settings_grad"].notes  # the run's, not its own
    assert ("isolated" in report.backends["jax_settings_grad"].notes) == (how == "isolated")
    _jax_untouched()


def test_a_precision_scoped_around_the_call_is_kept():
    """A classification re-run at ``highest`` enters its own context around the call: the run's choice
    is the default it refines, not a setting that undoes it."""
    with jax.default_matmul_precision("highest"):
        report = crosscheck.run(**TINY, backends=[probe.jax_settings_grad], jax_precision="high")
    assert _probed(report) == probe.code("default", "highest")


def test_the_json_and_the_header_say_where_each_side_ran_and_at_what_precision():
    pytest.importorskip("torch")
    report = crosscheck.run(**TINY, backends=["jax", "torch"], jax_platform="cpu", jax_precision="highest")
    data = json.loads(json.dumps(report.to_dict()))
    assert data["jax_settings"] == {
        "jax_platform": "cpu",
        "jax_precision": "highest",
        "jax_deterministic": "default",
    }
    j, t = data["backends"]["jax"], data["backends"]["torch"]
    assert (j["platform"], j["device_kind"], j["info"]["matmul_precision"]) == ("cpu", "cpu", "highest")
    assert (t["platform"], t["device_kind"]) == ("cpu", "cpu")
    assert t["info"]["float32_matmul_precision"] in ("highest", "high", "medium")
    header = title(report).splitlines()[1]
    assert header.startswith("where: `jax` on cpu (cpu), matmul precision highest; `torch` on cpu (cpu), ")
    assert "float32 matmul precision" in header
    _jax_untouched()


def test_left_alone_the_json_says_jaxs_own_default():
    report = crosscheck.run(**TINY, backends=["jax"])
    data = report.to_dict()
    assert data["jax_settings"] == {
        "jax_platform": "default",
        "jax_precision": "default",
        "jax_deterministic": "default",
    }
    assert data["backends"]["jax"]["info"]["matmul_precision"] == "default"
    assert data["backends"]["jax"]["platform"] == jax.devices()[0].platform


BAD = [
    ({"jax_platform": "tpu"}, ["--jax-platform", "tpu"], "jax_platform", "one of default, cpu; found 'tpu'"),
    ({"jax_precision": "low"}, ["--jax-precision", "low"], "jax_precision", "one of default, high, highest"),
    ({"jax_precision": "HIGHEST"}, ["--jax-precision", "HIGHEST"], "jax_precision", "found 'HIGHEST'"),
]


@pytest.mark.parametrize(("keywords", "argv", "name", "words"), BAD, ids=["platform", "precision", "case"])
def test_a_bad_value_is_refused_with_the_same_words_from_both_doors(keywords, argv, name, words, capsys):
    with pytest.raises(ValueError, match=f"^`{name}` must be .*{words}") as api:
        crosscheck.run(**TINY, **keywords)
    with pytest.raises(ValueError, match=f"^`{name}` must be"):
        crosscheck.Execution(**keywords)
    assert main(["run", "--layers", "1", "--dim", "2", "--batch", "2", *argv]) == 2
    err = capsys.readouterr().err.strip()
    option = "--" + name.replace("_", "-")
    assert err == "crosscheck: error: " + str(api.value).replace(f"`{name}`", f"`{option}`")


def test_the_request_carries_the_settings_to_a_contained_worker():
    from crosscheck._engine.request import Request

    execution = crosscheck.Execution(repeat=1, jax_platform="cpu", jax_precision="high")
    again = Request.from_data(Request(execution=execution).to_data())
    assert again.execution == execution


def test_a_replay_applies_the_recorded_settings_again(tmp_path, workers_find_the_probe):
    report = crosscheck.run(**TINY, backends=[PROBE], jax_platform="cpu", jax_precision="highest")
    assert not report.passed  # the probe's gradient is not the stack's: a bundle worth sending
    path = tmp_path / "b.npz"
    save_bundle(report, path)
    bundle = load_bundle(path)
    assert bundle["meta"]["report"]["jax_settings"] == {
        "jax_platform": "cpu",
        "jax_precision": "highest",
        "jax_deterministic": "default",
    }
    for isolate in (False, True):
        rows = replay(bundle, trust=True, isolate=isolate)
        assert reproduced(rows), rows
    _jax_untouched()


def test_a_bundle_with_settings_no_run_records_is_refused_in_one_line(tmp_path):
    report = crosscheck.run(**TINY, backends=[probe.jax_settings_grad], jax_precision="high")
    path = tmp_path / "b.npz"
    save_bundle(report, path)
    bundle = load_bundle(path)
    bundle["meta"]["report"]["jax_settings"]["jax_precision"] = "fastest"
    with pytest.raises(ValueError, match=r"^the bundle's `report.jax_settings` are not a run's: `jax_prec"):
        replay(bundle, trust=True)


def test_the_replay_command_says_the_settings_it_applies_again(tmp_path, capsys):
    report = crosscheck.run(**TINY, backends=[PROBE], jax_platform="cpu", jax_precision="high")
    path = tmp_path / "b.npz"
    save_bundle(report, path)
    assert main(["replay", str(path), "--trust", "--no-isolate"]) == 0
    printed = " ".join(capsys.readouterr().out.split())
    assert "the JAX side as recorded: --jax-platform cpu --jax-precision high" in printed
    assert "REPRODUCED bit for bit" in printed


def test_a_contained_run_whose_worker_died_still_records_the_settings_asked_for(workers_find_the_probe):
    """The report of a workload whose worker process died (``halted``) says what the run asked of the
    JAX side, as any report does."""
    execution = crosscheck.Execution(jax_platform="cpu", jax_precision="high")
    report = crosscheck.check("usercode:generate_dies", execution=execution).to_dict()
    assert report["halted"] and not report["passed"]
    assert report["jax_settings"] == {
        "jax_platform": "cpu",
        "jax_precision": "high",
        "jax_deterministic": "default",
    }


def test_asking_for_the_cpu_where_jax_has_none_fails_the_run_in_words(monkeypatch):
    """``JAX_PLATFORMS=tpu`` leaves JAX no CPU device: the run fails, and says why, never runs elsewhere."""
    devices = jax.devices

    def no_cpu(backend=None):
        if backend == "cpu":
            raise RuntimeError("Unknown backend cpu")
        return devices(backend)

    monkeypatch.setattr(jax, "devices", no_cpu)
    report = crosscheck.run(**TINY, backends=[probe.jax_settings_grad], jax_platform="cpu")
    assert not report.passed
    error = report.backends["jax_settings_grad"].error or ""
    assert "`jax_platform` cpu: JAX has no CPU device in this process" in error
    # reading where a backend runs never raises either: it is the record's info_error
    info = info_where(
        probe.jax_settings_grad, placements({"jax_platform": "cpu", "jax_precision": "default"})
    )
    assert "JAX has no CPU device" in info["info_error"]


def test_the_environment_line_says_the_process_s_own_precision_apart_from_the_runs_choice():
    """``--explain``'s environment line is the process's settings (JAX's default here), named as global
    so that it does not read as a contradiction of the header's ``where`` line."""
    from crosscheck._report.report import environment_line

    report = crosscheck.run(**TINY, backends=["jax"], jax_precision="highest")
    line = environment_line(report.environment)
    assert "global matmul precision default" in line
    assert "matmul precision highest" in title(report)
