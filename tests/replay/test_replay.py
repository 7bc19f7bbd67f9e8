"""A repro bundle is a file someone sent (``crosscheck replay``; ``_replay/``, ``_report/bundle.py``,
``_report/bundle_meta.py``).

Its import strings are code: only built-ins run unless trusted. Its arrays carry SHA-256 hashes and its
case record must make them. Malformed metadata is one line (exit 2), never a traceback. Its text never
reaches the terminal or a JUnit file as markup or control characters.
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET

import numpy as np
import pytest

import crosscheck
from crosscheck._cli.main import main
from crosscheck._replay.replay import replay, reproduced, verdict
from crosscheck._report.bundle import load_bundle, save_bundle, sha256

MODULE = """
import pathlib

pathlib.Path("imported.txt").write_text("trustmod ran at import")

def _grad(weights, x):
    ys, y = [x], x
    for w in weights:
        y = np.maximum(y @ w, 0)
        ys.append(y)
    g = 2 * y
    out = np.empty_like(weights)
    for k in reversed(range(len(weights))):
        delta = g * (ys[k + 1] > 0)
        out[k] = ys[k].T @ delta
        g = delta @ weights[k].T
    return out

import numpy as np

def twice(weights, x):
    return 2 * _grad(weights, x)

def writes(weights, x):
    out = _grad(weights, x)
    weights[0, 0, 0] = 5.0
    return out

def nothing(weights, x):
    return None
"""


@pytest.fixture
def bundle(tmp_path, monkeypatch):
    """A bundle of a failing run: the oracle, ``trustmod:twice`` (wrong) and ``torch``."""
    (tmp_path / "trustmod.py").write_text(MODULE)
    monkeypatch.setenv("COLUMNS", "250")  # no table cell wraps
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delitem(sys.modules, "trustmod", raising=False)
    report = crosscheck.run(layers=3, batch=4, dim=4, backends=["trustmod:twice", "torch"], isolate=False)
    assert not report.passed
    save_bundle(report, tmp_path / "b.npz")
    (tmp_path / "imported.txt").unlink()
    monkeypatch.delitem(sys.modules, "trustmod")
    return tmp_path / "b.npz"


def tamper(path, edit=None, arrays=None, out=None, rehash=False):
    """A copy of the bundle at ``path`` with its metadata edited (``edit(meta)`` returns the new
    metadata, or a JSON string) and entries replaced (``arrays``); the recorded hashes kept (``rehash``:
    the replaced entries' hashes recorded, as a crafted file would)."""
    with np.load(path) as data:
        entries = {k: data[k] for k in data.files}
    meta = json.loads(str(entries["meta"][()]))
    if rehash:
        meta["sha256"].update({k: sha256(a) for k, a in (arrays or {}).items()})
    if edit is not None:
        meta = edit(meta)
    entries["meta"] = np.array(meta if isinstance(meta, str) else json.dumps(meta))
    entries.update(arrays or {})
    out = out or path.with_name("tampered.npz")
    with open(out, "wb") as file:
        np.savez(file, **entries)
    return out


def set_spec(spec):
    def edit(meta):
        meta["report"]["backends"]["twice"]["notes"]["spec"] = spec
        return meta

    return edit


def _replay(capsys, *argv) -> tuple[int, str, str]:
    capsys.readouterr()
    status = main(["replay", *map(str, argv)])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


# -- import strings are code ----------------------------------------------------------------------------


def test_by_default_only_built_ins_run_and_every_import_string_is_listed(bundle, capsys):
    status, out, err = _replay(capsys, bundle)
    assert not (bundle.parent / "imported.txt").exists(), "the bundle's module was imported"
    assert "trustmod" not in sys.modules
    assert status == 1 and "NOT REPRODUCED: 1 of 3 backends not run (import strings are code)" in out
    notices = [line for line in err.splitlines() if line.startswith("crosscheck: not run")]
    assert notices == [
        "crosscheck: not run: backend `trustmod:twice`: an import string is code; --trust or --backend "
        "trustmod:twice runs it"
    ]
    assert out.count("│ bit for bit") == 2  # the oracle and torch


@pytest.mark.parametrize(
    ("spec", "status"),
    [("os:abort", 1), ("sys:exit", 1)],
    ids=["abort", "exit"],
)
def test_a_bundle_naming_a_dangerous_callable_does_not_run_it(bundle, capsys, spec, status):
    path = tamper(bundle, set_spec(spec))
    found, out, err = _replay(capsys, path)
    assert found == status and f"not run: backend `{spec}`" in err
    assert "NOT REPRODUCED" in out


def test_trusted_it_runs_in_a_worker_so_even_abort_is_a_row(bundle, capsys):
    status, out, _ = _replay(capsys, tamper(bundle, set_spec("os:abort")), "--trust")
    assert status == 1 and "killed by SIGABRT" in out and out.count("│ bit for bit") == 2


def test_trust_runs_the_import_strings(bundle, capsys):
    status, out, err = _replay(capsys, bundle, "--trust")
    assert status == 0 and out.count("│ bit for bit") == 3 and "not run" not in err
    assert (bundle.parent / "imported.txt").exists()


def test_naming_a_spec_runs_that_one(bundle, capsys):
    status, out, err = _replay(capsys, bundle, "--backend", "trustmod:twice")
    assert status == 0 and out.count("│ bit for bit") == 3 and "not run" not in err


def test_a_workload_import_string_is_code_too(bundle, capsys):
    path = tamper(bundle, lambda meta: {**meta, "workload": "trustmod:workload"})
    status, out, err = _replay(capsys, path, "--backend", "trustmod:twice")
    assert status == 1 and "not run: workload `trustmod:workload`" in err
    assert "│ bit for bit" not in out and not (bundle.parent / "imported.txt").exists()


def test_a_replayed_backend_that_writes_to_its_inputs_is_caught_not_the_next(bundle, capsys):
    """In process (``--no-isolate``), the writer first: its row says so, the oracle and torch after it
    get the arrays as they were and reproduce."""

    def writer_first(meta):
        backends = meta["report"]["backends"]
        backends["twice"]["notes"]["spec"] = "trustmod:writes"
        meta["values"] = {k: meta["values"][k] for k in ("twice", "numpy-fd", "torch")}
        return meta

    with np.load(bundle) as data:  # the value entries follow the order of `values`
        order = {name: b for b, name in enumerate(json.loads(str(data["meta"][()]))["values"])}
        swapped = {
            f"value_{i}_0": data[f"value_{order[n]}_0"] for i, n in enumerate(("twice", "numpy-fd", "torch"))
        }
        meta = json.loads(str(data["meta"][()]))
    hashes = {
        f"value_{i}_0": meta["sha256"][f"value_{order[n]}_0"]
        for i, n in enumerate(("twice", "numpy-fd", "torch"))
    }

    def edit(meta):
        meta = writer_first(meta)
        meta["sha256"].update(hashes)
        return meta

    path = tamper(bundle, edit, arrays=swapped)
    status, out, _ = _replay(capsys, path, "--trust", "--no-isolate")
    rows = {line.split("│")[1].strip(): line for line in out.splitlines() if line.count("│") > 3}
    assert "modified its inputs (`weights`)" in rows["twice"], out
    assert "bit for bit" in rows["numpy-fd"] and "bit for bit" in rows["torch"], out
    assert status == 1


# -- every backend of the bundle is a row, and only bit for bit passes ------------------------------------


def _rows(out):
    """Each table row by its backend, its cells' padding folded to one space."""
    return {
        line.split("│")[1].strip(): " ".join(line.split()) for line in out.splitlines() if line.count("│") > 3
    }


def _without_spec(*names):
    def edit(meta):
        for name in names:
            del meta["report"]["backends"][name]["notes"]["spec"]
        return meta

    return edit


@pytest.mark.parametrize("trust", [(), ("--trust",)], ids=["untrusted", "trusted"])
def test_candidates_without_a_spec_fail_the_replay_while_only_the_oracle_ran(bundle, capsys, trust):
    status, out, _ = _replay(capsys, tamper(bundle, _without_spec("twice", "torch")), *trust)
    rows = _rows(out)
    assert status == 1 and "bit for bit" in rows["numpy-fd"], out
    for name in ("twice", "torch"):
        assert "│ not replayable │ the bundle names no backend to load for it" in rows[name], out
    assert "NOT REPRODUCED: 2 of 3 backends not replayable" in out


def test_a_candidate_that_failed_in_the_run_is_a_row_that_fails_the_replay(bundle, capsys):
    """No value was saved for it (it returned None): untrusted, it is not run again and says so."""
    path = bundle.parent / "none.npz"
    report = crosscheck.run(layers=3, batch=4, dim=4, backends=["trustmod:nothing", "torch"], isolate=False)
    save_bundle(report, path)
    status, out, err = _replay(capsys, path)
    rows = _rows(out)
    assert status == 1 and "bit for bit" in rows["numpy-fd"] and "bit for bit" in rows["torch"], out
    assert "│ failed originally │ originally: returned None instead of an array" in rows["nothing"], out
    assert "now: not run (an import string is code)" in rows["nothing"], out
    assert "not run: backend `trustmod:nothing`" in err
    assert "NOT REPRODUCED: 1 of 3 backends failed originally" in out
    status, out, _ = _replay(capsys, path, "--trust")
    assert status == 1 and "now: failed the same way" in _rows(out)["nothing"], out


def test_a_backend_the_bundle_holds_no_value_of_is_run_and_still_fails(bundle, capsys):
    def drop_torch(meta):
        del meta["values"]["torch"]  # the last: the other entries keep their numbers
        return meta

    status, out, _ = _replay(capsys, tamper(bundle, drop_torch))
    rows = _rows(out)
    assert status == 1 and "bit for bit" in rows["numpy-fd"], out
    assert "│ no value saved │ the bundle holds no value for it (originally: ok); now: ran" in rows["torch"]
    assert "NOT REPRODUCED: 1 of 3 backends not run (import strings are code); 1 of 3 backends have no" in out


def test_a_saved_value_missing_a_parameter_differs(bundle, capsys):
    def empty_torch(meta):
        meta["values"]["torch"] = []
        return meta

    status, out, _ = _replay(capsys, tamper(bundle, empty_torch))
    assert status == 1 and "│ differs │ `weights` has no saved value" in _rows(out)["torch"], out


def test_a_bundle_of_no_backend_reproduces_nothing(bundle, capsys):
    def empty(meta):
        meta["values"], meta["report"]["backends"] = {}, {}
        return meta

    status, out, _ = _replay(capsys, tamper(bundle, empty))
    assert status == 1 and "NOT REPRODUCED: the bundle records no backend" in out
    assert not reproduced([]) and verdict([]) == "NOT REPRODUCED: the bundle records no backend"


# -- the arrays are the bundle's -----------------------------------------------------------------------


def test_a_changed_array_is_refused_by_its_hash(bundle, capsys):
    path = tamper(bundle, arrays={"value_1_0": np.zeros((3, 4, 4), np.float32)})
    status, _, err = _replay(capsys, path)
    assert status == 2 and "entry `value_1_0` is not the array the bundle recorded (SHA-256 differs)" in err


def test_a_case_record_that_does_not_make_the_arrays_is_refused(bundle, capsys):
    def lie(meta):
        meta["report"]["case"].update(layers=8, dim=64, seed=99, init="identity")
        return meta

    status, out, err = _replay(capsys, tamper(bundle, lie))
    assert status == 2 and "REPRODUCED" not in out
    assert "case record (layers=8, batch=4, dim=64, dtype=float32, seed=99, init=identity" in err
    assert "does not make its `weights` array" in err


def _huge(meta):
    meta["report"]["case"].update(layers=10**3, dim=10**6)
    return meta


def test_a_case_record_too_large_for_memory_is_refused_with_its_estimate(bundle, capsys):
    # A record is a line of text: generating its arrays would allocate petabytes before any check.
    status, out, err = _replay(capsys, tamper(bundle, _huge))
    assert status == 2 and "REPRODUCED" not in out and "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "cannot replay the bundle's case (layers=1000, batch=4, dim=1000000" in lines[0]
    assert "this case needs about" in lines[0] and "oracle" in lines[0] and "TiB" in lines[0]
    assert "this machine has available" in lines[0]


VERSIONS = {
    "newer": (99, "format version 99;"),
    "zero": (0, "format version 0;"),
    "text": ("2", 'format version "2";'),
    "bool": (True, "format version true;"),
    "missing": (None, "format version none;"),
}


@pytest.mark.parametrize("kind", list(VERSIONS), ids=list(VERSIONS))
def test_a_bundle_of_an_unknown_format_version_is_refused(bundle, capsys, kind):
    version, phrase = VERSIONS[kind]

    def edit(meta):
        if version is None:
            del meta["version"]
        else:
            meta["version"] = version
        return meta

    status, out, err = _replay(capsys, tamper(bundle, edit))
    assert status == 2 and "REPRODUCED" not in out, out + err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and phrase in lines[0], err
    assert "this crosscheck reads versions 1 and 2" in lines[0]


@pytest.fixture
def user_bundle(bundle):
    """A bundle of a failing run on your own arrays (``--weights/--x``): the oracle, ``trustmod:twice``
    and ``torch``."""
    rng = np.random.default_rng(3)
    weights, x = rng.standard_normal((3, 4, 4)), rng.standard_normal((4, 4))
    report = crosscheck.run(
        weights=weights.astype(np.float32), x=x.astype(np.float32), backends=["trustmod:twice", "torch"]
    )
    assert report.case["source"] == "user arrays"
    save_bundle(report, bundle.parent / "user.npz")
    return bundle.parent / "user.npz"


def _case(edit):
    def on_meta(meta):
        edit(meta["report"]["case"])
        return meta

    return on_meta


def test_a_bundle_of_your_own_arrays_replays_bit_for_bit(user_bundle, capsys):
    status, out, _ = _replay(capsys, user_bundle, "--trust")
    assert status == 0 and out.count("│ bit for bit") == 3, out


INTS = np.ones((3, 4, 4), np.int32), np.ones((4, 4), np.int32)
USER_ARRAYS = {
    # A record that claims your arrays but no hash of one: nothing would check it, so it is refused.
    "no-hash": (
        {},
        _case(lambda case: case.pop("x_sha256")),
        "records no SHA-256 of its `x` array (`x_sha256`)",
    ),
    # Arrays --weights would refuse, with hashes that match them: refused as --weights refuses them.
    "nan": (
        {"param_0": np.full((3, 4, 4), np.nan, np.float32)},
        _case(lambda case: case.update(weights_sha256=sha256(np.full((3, 4, 4), np.nan, np.float32)))),
        "the bundle's user arrays are not valid: `weights` must be finite; found 48 NaN",
    ),
    "int": (
        {"param_0": INTS[0], "input_0": INTS[1]},
        _case(lambda case: case.update(weights_sha256=sha256(INTS[0]), x_sha256=sha256(INTS[1]))),
        "the bundle's user arrays are not valid: `weights` must be float32 or float64; found int32",
    ),
    "shape": (
        {"input_0": np.ones((4, 3), np.float32)},
        _case(lambda case: case.update(x_sha256=sha256(np.ones((4, 3), np.float32)))),
        "the bundle's user arrays are not valid: `x` must have shape (N, 4)",
    ),
    "record": ({}, _case(lambda case: case.update(layers=5)), "says layers=5, its user arrays make 3"),
}


@pytest.mark.parametrize("kind", list(USER_ARRAYS), ids=list(USER_ARRAYS))
def test_your_own_arrays_in_a_bundle_are_checked_like_weights(user_bundle, capsys, kind):
    arrays, edit, phrase = USER_ARRAYS[kind]
    status, out, err = _replay(capsys, tamper(user_bundle, edit, arrays=arrays, rehash=True), "--trust")
    assert status == 2 and "REPRODUCED" not in out, out + err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and phrase in lines[0], err


def test_your_own_arrays_in_a_bundle_are_refused_when_their_replay_cannot_fit(
    user_bundle, capsys, monkeypatch
):
    monkeypatch.setattr("crosscheck._engine.plan.available_memory", lambda: 2**10)
    status, out, err = _replay(capsys, user_bundle, "--trust")
    assert status == 2 and "REPRODUCED" not in out, out + err
    lines = err.strip().splitlines()
    refused = "cannot replay the bundle's case (user arrays): this case needs about"
    assert len(lines) == 1 and refused in lines[0], err
    assert "more than the 1 KiB this machine has available" in lines[0], err


def test_a_bundle_without_hashes_still_loads(bundle):
    path = tamper(bundle, lambda meta: {k: v for k, v in meta.items() if k != "sha256"})
    assert set(load_bundle(path)["gradients"]) == {"numpy-fd", "twice", "torch"}


# -- malformed metadata: one line, exit 2 --------------------------------------------------------------


def _nest(depth):
    return '{"format": "crosscheck-bundle", "version": 2, "x": ' + "[" * depth + "]" * depth + "}"


MALFORMED = {
    "no-report": (lambda m: {k: v for k, v in m.items() if k != "report"}, "`report` is missing"),
    "null-report": (lambda m: {**m, "report": None}, "`report` must be an object"),
    "no-case": (lambda m: {**m, "report": {k: v for k, v in m["report"].items() if k != "case"}}, "case"),
    "case-string": (lambda m: {**m, "report": {**m["report"], "case": "x"}}, "`report.case` must be"),
    "grads-string": (lambda m: {**m, "values": "x"}, "`values` must be an object"),
    "grads-list": (lambda m: {**m, "values": [["weights"]]}, "`values` must be an object"),
    "backends-list": (lambda m: {**m, "report": {**m["report"], "backends": []}}, "`report.backends`"),
    "parameters-object": (lambda m: {**m, "parameters": {"a": 1}}, "`parameters` must be a list"),
    "parameters-empty": (lambda m: {**m, "parameters": []}, "`parameters` is empty"),
    "workload-int": (lambda m: {**m, "workload": 3}, "`workload` must be"),
    "spec-int": (set_spec(7), "notes.spec` must be a name"),
    "sha-list": (lambda m: {**m, "sha256": []}, "`sha256` must be an object"),
    "deep": (lambda m: _nest(100_000), "nested too deeply"),
    "not-json": (lambda m: "{", "not a readable crosscheck bundle"),
}


@pytest.mark.parametrize("kind", list(MALFORMED), ids=list(MALFORMED))
def test_malformed_metadata_is_one_line(bundle, capsys, kind):
    edit, phrase = MALFORMED[kind]
    status, _, err = _replay(capsys, tamper(bundle, edit))
    assert status == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and phrase in lines[0] and "Traceback" not in err, err


# -- text from a file stays text -----------------------------------------------------------------------


def test_markup_and_control_characters_from_a_bundle_stay_text(bundle, capsys):
    evil = "[bold red]boom\x1b[31m\x07"
    path = tamper(bundle, set_spec(evil))
    status, out, err = _replay(capsys, path)
    assert "\x1b" not in out + err and "\x07" not in out + err
    assert "[bold red]boom" in out and "[bold red]boom" in err  # shown as written, not as markup
    assert status == 1


def test_a_control_character_in_a_backends_error_leaves_junit_valid(tmp_path):
    def broken(weights, x):
        raise ValueError("bad \x00\x1b[31m\x0b bytes")

    report = crosscheck.run(layers=2, batch=2, dim=2, backends=[broken])
    path = tmp_path / "r.xml"
    from crosscheck._report.junit import write_junit

    write_junit([("case", report)], path)
    text = path.read_text()
    assert "\x00" not in text and "\x1b" not in text
    (error,) = ET.parse(path).getroot().iter("error")
    assert "bad" in error.get("message") and "bytes" in error.get("message")


def test_replay_in_python_takes_trust(bundle):
    rows = {row["backend"]: row for row in replay(load_bundle(bundle))}
    assert rows["twice"]["status"] == "not run" and rows["torch"]["status"] == "bit for bit"
    rows = {row["backend"]: row for row in replay(load_bundle(bundle), trust=["trustmod:twice"])}
    assert rows["twice"]["status"] == "bit for bit"
