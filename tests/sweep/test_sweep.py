"""Sweeps: the same per-case records in one worker, in parallel processes and on a Dask cluster, with a
case that fails, one that crashes its process and one that times out, none stopping the others.

Each sweep starts processes (seconds), so the tests run few sweeps over tiny cases (d = 2..5).
"""

from __future__ import annotations

import io
import json
import os
import xml.etree.ElementTree as ET

import processes
import pytest
from paths import SUPPORT

from crosscheck._cli.main import main
from crosscheck._cli.sweep import render, write_junit
from crosscheck._sweep.engine import STACK, sweep
from crosscheck._sweep.task import CRASHED

BACKEND = "sweep_planted:by_dim"
#: d -> what the planted backend does there (see tests/support/sweep_planted.py).
EXPECTED = {2: "passed", 3: "crashed", 4: "failed", 5: "timeout"}
TIMEOUT = 3.0


def _case(dim: int) -> dict:
    return {
        "workload": STACK,
        "layers": 2,
        "batch": 2,
        "dim": dim,
        "dtype": "float64",
        "seed": 0,
        "init": "gaussian",
        "scale": 1.0,
    }


CASES = [_case(d) for d in EXPECTED]


def _without_timing(value):
    """The record with every timing field (``seconds``) and the worker's environment record dropped."""
    if isinstance(value, dict):
        return {k: _without_timing(v) for k, v in value.items() if k not in ("seconds", "environment")}
    if isinstance(value, list):
        return [_without_timing(v) for v in value]
    return value


@pytest.fixture(scope="module")
def cluster():
    """One Dask LocalCluster (2 worker processes, 1 thread each) for the module."""
    distributed = pytest.importorskip("distributed")
    import dask

    # A worker death fails the cases it held at once (KilledWorker) instead of Dask retrying them on 3
    # more workers; the sweep then re-runs each alone, so a case queued behind the crash still passes.
    settings = {"distributed.scheduler.allowed-failures": 0}
    with pytest.MonkeyPatch.context() as mp:
        # Worker processes find the planted backends (tests/) and this checkout like the test process.
        mp.setenv("PYTHONPATH", os.pathsep.join([str(SUPPORT), os.environ.get("PYTHONPATH", "")]))
        with (
            dask.config.set(settings),
            distributed.LocalCluster(
                n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0"
            ) as local,
        ):
            yield local


@pytest.fixture(scope="module")
def by_engine(cluster):
    """The same sweep three ways: one worker process, two, and the Dask cluster."""
    results = {}
    for name, engine in (
        ("one worker", {"jobs": 1}),
        ("two workers", {"jobs": 2}),
        ("dask", {"scheduler": cluster.scheduler_address}),
    ):
        results[name] = sweep(CASES, backends=[BACKEND], timeout=TIMEOUT, **engine)
    return results


@pytest.mark.parametrize("engine", ["one worker", "two workers", "dask"])
def test_every_case_gets_its_status(by_engine, engine):
    result = by_engine[engine]
    assert [r["status"] for r in result.records] == list(EXPECTED.values())
    assert [r["case"]["dim"] for r in result.records] == list(EXPECTED)
    assert result.passed is False
    assert result.counts() == {"passed": 1, "failed": 1, "error": 0, "crashed": 1, "timeout": 1}
    passed, crashed, failed, timed_out = result.records
    assert passed["report"]["comparisons"][0]["passed"] is True
    assert crashed["error"] == CRASHED and crashed["report"] is None
    assert failed["report"]["comparisons"][0]["status"] == "mismatch"
    assert failed["error"] == "`by_dim` disagrees with `numpy-fd`"
    assert timed_out["error"] == "did not finish within 3 s (--timeout)"
    assert timed_out["report"] is None


def test_results_are_identical_whichever_way_the_sweep_ran(by_engine):
    records = {name: _without_timing(result.records) for name, result in by_engine.items()}
    assert records["one worker"] == records["two workers"]
    assert records["one worker"] == records["dask"]
    # Round-trips through JSON unchanged (the records are what --json writes).
    assert json.loads(json.dumps(records["dask"])) == records["dask"]


def test_in_process_gives_the_same_records(by_engine):
    safe = [c for c in CASES if c["dim"] in (2, 4)]  # no crash or hang in the test process
    result = sweep(safe, backends=[BACKEND], timeout=TIMEOUT, jobs=0)
    expected = [r for r in by_engine["one worker"].records if r["case"]["dim"] in (2, 4)]
    for record, reference in zip(result.records, expected, strict=True):
        assert _without_timing({**record, "index": 0}) == _without_timing({**reference, "index": 0})


def test_junit_and_table_show_every_status(by_engine, tmp_path):
    from rich.console import Console

    result = by_engine["two workers"]
    write_junit(result, tmp_path / "sweep.xml")
    suites = ET.parse(tmp_path / "sweep.xml").getroot().findall("testsuite")
    assert [(s.get("failures"), s.get("errors")) for s in suites] == [
        ("0", "0"),
        ("0", "1"),
        ("1", "0"),
        ("0", "1"),
    ]
    assert suites[1].find("testcase/error").get("type") == "crashed"
    assert suites[3].find("testcase/error").get("message") == "timeout: did not finish within 3 s (--timeout)"
    console = Console(file=io.StringIO(), width=200)
    render(result, console)
    text = console.file.getvalue()
    for word in ("CRASHED", "TIMEOUT", "FAILED", "mismatch"):
        assert word in text
    assert "FAILED: 3 of 4 cases (1 failed, 1 crashed, 1 timeout)" in text


def test_a_case_that_raises_is_an_error_record():
    result = sweep(CASES[:1], backends=["nosuchmodule:grad"], jobs=0)
    (record,) = result.records
    assert record["status"] == "error"
    assert record["error"].startswith("ValueError: backend `nosuchmodule:grad`: cannot import module")
    assert record["report"] is None
    assert result.counts()["error"] == 1


def test_sweep_rejects_backend_objects():
    with pytest.raises(TypeError, match="names or import strings"):
        sweep(CASES[:1], backends=[print], jobs=0)


def test_cli_reads_the_config_and_writes_reports(tmp_path, monkeypatch, capsys):
    (tmp_path / "pyproject.toml").write_text(
        "[tool.crosscheck]\n"
        "layers = [2]\nbatch = [2]\ndim = [2, 4]\ndtypes = ['float64']\n"
        f"backends = ['{BACKEND}']\ntimeout = 60\n"
    )
    monkeypatch.chdir(tmp_path)
    status = main(["sweep", "--jobs", "2", "--json", "sweep.json", "--junit", "sweep.xml"])
    out = capsys.readouterr().out
    assert status == 1, out
    assert f"crosscheck sweep: 2 cases, from {tmp_path / 'pyproject.toml'}" in out
    assert "FAILED: 1 of 2 cases (1 failed)" in out
    assert "gaussian L=2 N=2 d=4 float64 seed=0: `by_dim` disagrees with `numpy-fd`" in out
    report = json.loads((tmp_path / "sweep.json").read_text())
    assert report["passed"] is False
    assert report["summary"] == {"cases": 2, "passed": 1, "failed": 1, "error": 0, "crashed": 0, "timeout": 0}
    assert report["config"] == str(tmp_path / "pyproject.toml")
    assert report["options"]["timeout"] == 60
    assert [c["case"]["dim"] for c in report["cases"]] == [2, 4]
    suites = ET.parse(tmp_path / "sweep.xml").getroot().findall("testsuite")
    assert [s.get("failures") for s in suites] == ["0", "1"]
    assert suites[1].find("testcase/failure").get("message").startswith("Mismatched elements")


def _comparison(
    backend: str, parameter: str, passed: bool, mismatched: int, judged: int, rel: float | str, **more
) -> dict:
    return {
        "backend": backend,
        "parameter": parameter,
        "passed": passed,
        "status": "ok" if passed else "mismatch",
        "mismatched": mismatched,
        "judged": judged,
        "max_rel_diff": rel,
        "worst_ratio": 0.5 if rel == "inf" else float(rel) * 1e3,
        "decided_by": "rounding",
        "unjudgeable": 0,
        "two_sided": 0,
        **more,
    }


def test_a_cell_sums_a_workloads_comparisons_per_parameter():
    from crosscheck._cli.sweep import _cells

    comparisons = [
        _comparison("jax", "w", False, 3, 8, 1e-2),
        _comparison("jax", "b", False, 1, 2, 1e-3),
        _comparison("torch", "w", True, 0, 8, 2e-7),
        _comparison("torch", "b", True, 0, 2, 5e-7),
    ]
    record = {"report": {"comparisons": comparisons, "backends": {}}}
    assert _cells(record, ["jax", "torch", "other"]) == [
        "[red]mismatch 4/10[/red]",
        "ok 0.05% of tol (rounding)",
        "-",
    ]


@pytest.mark.parametrize(
    ("comparisons", "cell"),
    [
        # The nearzero case: an entry whose reference is exactly zero has an infinite relative difference
        # (the JSON's "inf"), an entry at a kink one of 1.2: neither decided; the ratio and its term did.
        (
            [
                _comparison(
                    "torch", "w", True, 0, 840, "inf", worst_ratio=0.034, unjudgeable=1208, two_sided=19
                ),
                _comparison("torch", "b", True, 0, 8, 1.2, worst_ratio=0.002, decided_by="floor"),
            ],
            "ok 3.4% of tol (rounding; 1227 kink)",
        ),
        # A zero by construction judged by the floor: a relative difference of 13 that decided nothing.
        (
            [_comparison("torch", "b", True, 0, 4, 13.0, worst_ratio=0.25, decided_by="floor")],
            "ok 25% of tol (floor)",
        ),
        # Screened along directions: no entry's ratio, nothing invented.
        ([_comparison("torch", "w", True, 0, 4, 1e-3, worst_ratio=None)], "ok"),
    ],
    ids=["infinite-rel-and-kinks", "zero-by-construction", "screened"],
)
def test_a_passing_cell_shows_its_ratio_to_the_tolerance_and_the_term_that_decided(comparisons, cell):
    from crosscheck._cli.sweep import _cells

    assert _cells({"report": {"comparisons": comparisons, "backends": {}}}, ["torch"]) == [cell]


def test_a_workload_sweep_has_one_column_per_backend_not_per_parameter():
    from rich.console import Console

    from crosscheck._sweep.engine import SweepResult

    comparisons = [
        _comparison("jax", "w", True, 0, 8, 1e-6),
        _comparison("jax", "b", True, 0, 2, 1e-7),
        _comparison("torch", "w", True, 0, 8, 2e-7),
        _comparison("torch", "b", True, 0, 2, 5e-7),
    ]
    record = {
        "index": 0,
        "case": {"workload": "mymodel:workload", "dtype": "float32", "seed": 0},
        "status": "passed",
        "passed": True,
        "error": None,
        "known_answer": None,
        "seconds": 1.0,
        "report": {"comparisons": comparisons, "backends": {}},
    }
    console = Console(file=io.StringIO(), width=200)
    render(SweepResult(records=[record], options={}, engine={}), console)
    header = next(line for line in console.file.getvalue().splitlines() if "case" in line)
    assert header.split().count("jax") == 1
    assert header.split().count("torch") == 1


# -- big matrices, too many jobs, Ctrl-C and SIGTERM -------------------------------------------------


def test_a_matrix_of_a_hundred_thousand_cases_expands_with_duplicates_dropped_in_order():
    """Expansion and de-duplication are linear (``benchmarks/bench_matrix.py`` times them): 10**5
    cases take well under a second; the quadratic de-duplication took about six minutes."""
    from crosscheck._sweep.config import SweepConfig, cases

    config = SweepConfig().merged({"seeds": list(range(100_000)), "workloads": ["stack", "stack"]})
    found = cases(config, limit=None)
    assert [c["seed"] for c in found] == list(range(100_000))


def test_a_matrix_over_the_limit_is_refused_with_its_size(tmp_path, capsys):
    config = tmp_path / "pyproject.toml"
    config.write_text(f"[tool.crosscheck]\nseeds = {list(range(10_001))}\ndim = [2]\n")
    assert main(["sweep", "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert "the matrix has 10001 cases" in err and "more than the limit of 10000" in err
    assert "--max-cases 10001" in err and len(err.strip().splitlines()) == 1

    from crosscheck._sweep.config import ConfigError, cases, load_config

    assert len(cases(load_config(config), limit=10_001)) == 10_001
    with pytest.raises(ConfigError, match="the matrix has 10001 cases"):
        cases(load_config(config), limit=10_000)


def test_more_jobs_than_cpus_are_clamped_with_a_note(tmp_path, capsys):
    from crosscheck._sweep.engine import cpu_count

    path = tmp_path / "sweep.json"
    argv = ["sweep", "--layers", "2", "--batch", "2", "--dim", "2", "--backend", "numpy-fd"]
    assert main([*argv, "--reference", "numpy-fd", "--jobs", "999", "--json", str(path)]) == 0
    err = capsys.readouterr().err
    assert f"--jobs 999 is more than the {cpu_count()} CPUs this process may use" in err
    assert json.loads(path.read_text())["engine"]["jobs"] == cpu_count()


@pytest.mark.parametrize(
    ("signame", "jobs", "status"),
    [("SIGINT", "2", 130), ("SIGTERM", "2", 143), ("SIGINT", "0", 130)],
    ids=["ctrl-c-workers", "sigterm-workers", "ctrl-c-in-process"],
)
def test_a_signal_stops_the_sweep_and_its_workers_within_seconds(tmp_path, signame, jobs, status):
    """A slow backend in every case; the signal once it has started: the sweep exits within seconds
    with the records so far (JSON written), and no worker, nor the resource tracker, outlives it."""
    import signal
    import sys
    import time

    marker, report = tmp_path / "started", tmp_path / "sweep.json"
    command = [sys.executable, "-m", "crosscheck", "sweep", "--layers", "2", "--batch", "2", "--dim", "2"]
    command += ["--seed", "0", "--seed", "1", "--seed", "2", "--backend", "hostile:stack_slow"]
    command += ["--jobs", jobs, "--json", str(report)]
    process = processes.start(command, tmp_path, marker)
    try:
        processes.wait_until_started(marker, process)
        children = processes.children(process.pid, deep=True)
        start = time.monotonic()
        process.send_signal(getattr(signal, signame))
        out, _ = process.communicate(timeout=20)
        took = time.monotonic() - start
    finally:
        process.kill()
        process.wait()
        process.stdout.close()
    assert process.returncode == status, out
    assert took < 10, f"{took:.1f} s to stop"
    assert f"INTERRUPTED ({signame})" in out and "of 3 cases finished" in out, out
    found = json.loads(report.read_text())
    assert found["interrupted"] == signame and found["planned"] == 3 and found["passed"] is False
    deadline = time.monotonic() + 5
    while [p for p in children if processes.alive(p)] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [p for p in children if processes.alive(p)], (
        "a worker (or the resource tracker) outlived the sweep"
    )


class _PoolThatBreaksOnSubmit:
    """A process pool whose worker running the second task dies just before the third is submitted:
    ``submit`` then raises ``BrokenProcessPool`` (a race the by_dim sweep met at load 17)."""

    def __init__(self, *args, **kwargs):
        self.futures = []

    def submit(self, fn, task):
        from concurrent.futures import Future
        from concurrent.futures.process import BrokenProcessPool

        if len(self.futures) == 2:
            self.futures[1].set_exception(BrokenProcessPool("a child process terminated abruptly"))
            raise BrokenProcessPool("a child process terminated abruptly")
        future = Future()
        if not self.futures:
            future.set_result({"index": task["index"], "status": "passed"})
        self.futures.append(future)
        return future

    def shutdown(self, wait=True, cancel_futures=False):
        pass


def test_a_worker_dying_while_tasks_are_submitted_loses_only_the_running_case(monkeypatch):
    import collections

    from crosscheck._sweep import engine

    monkeypatch.setattr(engine, "ProcessPoolExecutor", _PoolThatBreaksOnSubmit)
    tasks = collections.deque({"index": i} for i in range(4))
    records = []
    lost = engine._pool_pass(tasks, records.append, jobs=2)
    assert records == [{"index": 0, "status": "passed"}]
    assert lost == [{"index": 1}]  # re-run alone by run_processes, where a crash is pinned on it
    assert list(tasks) == [{"index": 2}, {"index": 3}]  # never started: still to run
