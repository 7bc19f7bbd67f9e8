"""JUnit XML: parsed back, one test case per comparison, failures carrying the mismatch message."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import planted
import pytest

import crosscheck
from crosscheck._cli.main import main
from crosscheck._report.junit import case_name, write_junit


def _broken(weights, x):
    raise RuntimeError("boom")


def test_junit_has_a_case_per_comparison_and_the_failure_message(tmp_path):
    report = crosscheck.run(layers=3, dim=4, batch=2, backends=[planted.correct, planted.transposed, _broken])
    path = tmp_path / "r.xml"
    write_junit([(case_name(report), report)], path)
    (suite,) = ET.parse(path).getroot().findall("testsuite")
    assert suite.get("name") == "gaussian L=3 N=2 d=4 float32 seed=0"
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("3", "1", "1")
    cases = {case.get("name"): case for case in suite.findall("testcase")}
    assert set(cases) == {"correct vs numpy-fd", "transposed vs numpy-fd", "_broken"}
    assert cases["correct vs numpy-fd"].find("failure") is None
    failure = cases["transposed vs numpy-fd"].find("failure")
    assert failure.get("message").startswith("Mismatched elements: ")
    assert "Worst entry" in failure.text
    assert "RuntimeError: boom" in cases["_broken"].find("error").get("message")


def test_cli_writes_junit_for_run_and_sweep(tmp_path, monkeypatch):
    from crosscheck._workloads.stack import matrix as _matrix

    path = tmp_path / "run.xml"
    assert (
        main(["run", "--layers", "2", "--dim", "3", "--backend", "numpy-fd", "--junit", str(path), "--quiet"])
        == 0
    )
    assert (
        ET.parse(path).getroot().find("testsuite/testcase").get("name") == "numpy-fd#2 vs numpy-fd"
    )  # the candidate is named as in `backends`
    monkeypatch.setattr(_matrix, "CASES", _matrix.CASES[:2])
    monkeypatch.chdir(tmp_path)  # no [tool.crosscheck]: the built-in matrix
    path = tmp_path / "sweep.xml"
    assert main(["sweep", "--jobs", "0", "--backend", "numpy-fd", "--junit", str(path)]) == 0
    assert len(ET.parse(path).getroot().findall("testsuite")) == 2


def test_report_records_the_environment_without_importing_frameworks():
    report = crosscheck.run(layers=2, dim=2, batch=1, backends=[planted.correct])
    env = report.to_dict()["environment"]
    assert env["numpy"]["version"]
    assert isinstance(env["numpy"]["subnormals_flushed"], bool)
    assert "OMP_NUM_THREADS" in env["thread_variables"]


def test_environment_records_framework_precision_settings_when_used():
    pytest.importorskip("torch")
    report = crosscheck.run(layers=2, dim=2, batch=1, backends=["torch"])
    torch_env = report.to_dict()["environment"]["torch"]
    assert torch_env["float32_matmul_precision"] in ("highest", "high", "medium")
    assert isinstance(torch_env["cuda_matmul_allow_tf32"], bool)
    assert isinstance(torch_env["deterministic_algorithms"], bool)
