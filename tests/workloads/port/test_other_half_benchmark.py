"""The other half's benchmark (``benchmarks/other_half.py``): the cases it builds from the examples'
tables, the runs it makes of them, and how it judges a row; no model is run (the examples' modules import
no framework, and the one subprocess is replaced)."""

from __future__ import annotations

import subprocess

import pytest

from benchmarks import other_half, zoo
from examples.port import adam, custom_op, custom_op_equinox, diffusers_twins, unet


def _names(chosen):
    return [(case.family, case.name) for case in chosen]


def test_every_family_s_healthy_pairs_come_first_and_every_planted_bug_carries_its_module():
    chosen = other_half.cases(list(other_half.FAMILIES), "all")
    for family, module in [
        ("unet", unet),
        ("custom_op", custom_op),
        ("custom_op_equinox", custom_op_equinox),
        ("adam", adam),
        ("diffusers_twins", None),
    ]:
        mine = [case for case in chosen if case.family == family]
        healthy = [case.name for case in mine if case.healthy]
        assert [case.healthy for case in mine] == sorted((case.healthy for case in mine), reverse=True)
        if module is not None:
            tables = {**module.BUGS, **getattr(module, "TRAINING", {})}
            bugs = {case.name: case.expected for case in mine if not case.healthy}
            assert bugs == {name: p.module for name, p in tables.items() if p.module}
    assert healthy == ["unet", "vae"]  # diffusers' two pairs
    assert {case.expected for case in chosen if case.family == "diffusers_twins"} - {None} == {
        p.module for p in diffusers_twins.BUGS.values()
    }
    unet_healthy = [case.name for case in chosen if case.family == "unet" and case.healthy]
    assert unet_healthy == [*unet.HEALTHY, *(name for name, p in unet.TRAINING.items() if not p.module)]
    assert {"train", "train_workaround", "train_convert"} <= set(unet_healthy)


def test_the_adam_cases_check_the_update_and_the_float64_only_bug_says_so():
    by_name = {(case.family, case.name): case for case in other_half.cases(list(other_half.FAMILIES), "all")}
    assert {case.quantity for (family, _), case in by_name.items() if family == "adam"} == {"update"}
    assert by_name["adam", "coupled_l2"].expected == "weight decay"
    assert by_name["custom_op", "eps_outside_sqrt"].seen_in == "float64"
    assert by_name["custom_op", "missing_term"].seen_in == "float32"
    unseen = [name for (_, name), case in by_name.items() if case.unseen]
    assert unseen == ["train_workaround_momentum"]  # its torch_call turns PyTorch's statistics off


def test_the_benchmark_chooses_by_kind_by_name_and_by_family():
    healthy_first = sorted(unet.TRAINING, key=lambda name: bool(unet.TRAINING[name].module))
    assert _names(other_half.cases(["unet"], "train")) == [("unet", name) for name in healthy_first]
    assert _names(other_half.cases(["unet", "custom_op"], "port")) == [
        ("unet", "port"),
        ("custom_op", "port"),
    ]
    chosen = other_half.cases(["unet", "custom_op"], "custom_op:port,unet:odd,odd")
    assert _names(chosen) == [("unet", "odd"), ("custom_op", "port")]
    assert other_half.cases(["adam"], "healthy,adamw") == other_half.cases(["adam"], "healthy")
    assert all(not case.healthy for case in other_half.cases(["diffusers_twins"], "bugs"))


def test_a_train_runs_once_in_float32_and_a_port_with_each_reference_and_dtype():
    chosen = other_half.cases(["adam", "custom_op"], "adamw,port")
    plan = list(other_half.runs(chosen, ["torch", "numpy-fd"], ["float32", "float64"], [0]))
    assert [(case.name, reference, dtype) for case, reference, dtype, _ in plan] == [
        ("adamw", "numpy-fd", "float32"),
        ("port", "torch", "float32"),
        ("port", "numpy-fd", "float32"),
        ("port", "torch", "float64"),
        ("port", "numpy-fd", "float64"),
    ]
    plan = list(other_half.runs(chosen[:1], ["torch"], ["float32"], [0, 1]))
    assert [(reference, seed) for _, reference, _, seed in plan] == [("torch", 0), ("torch", 1)]


def _report(passed, *, module=None, update=None):
    notes = {"port": {"module": module}} if update is None else {"update": update}
    return {
        "case": {"parameters": ["a", "b"]},
        "passed": passed,
        "problems": [] if passed else ["differs"],
        "backends": {"jax": {"notes": notes}},
    }


def _judged(family, name, data, dtype="float32"):
    case = next(case for case in other_half.family_cases(family) if case.name == name)
    row = other_half.Row(family, name, "torch", dtype, 0, case.quantity)
    other_half.describe(row, case, data, "exit 1: last line")
    return row, other_half.right(row, case)


@pytest.mark.parametrize(
    ("family", "name", "data", "dtype", "expected"),
    [
        ("unet", "attention_scale", _report(False, module="attn"), "float32", True),
        ("unet", "attention_scale", _report(False, module="attn.q"), "float32", False),
        ("unet", "attention_scale", _report(True), "float32", False),
        ("unet", "port", _report(True), "float32", True),
        ("unet", "port", _report(False, module="conv_out"), "float32", False),
        ("custom_op", "eps_outside_sqrt", _report(True), "float32", True),
        ("custom_op", "eps_outside_sqrt", _report(True), "float64", False),
        ("custom_op", "eps_outside_sqrt", _report(False, module="norm"), "float64", True),
        ("unet", "train_workaround_momentum", _report(True), "float32", True),
        ("unet", "train_momentum", _report(False, module="bn"), "float32", True),
        ("unet", "train_momentum", _report(False), "float32", False),
        ("adam", "coupled_l2", _report(False, update={"part": "weight decay"}), "float32", True),
        ("adam", "coupled_l2", _report(False, update={"part": None}), "float32", False),
        (
            "adam",
            "adamw_train_momentum",
            _report(False, update={"part": None, "module": "bn"}),
            "float32",
            True,
        ),
        ("unet", "odd", None, "float32", False),
    ],
)
def test_a_row_is_right_only_with_its_case_s_verdict_at_its_module(family, name, data, dtype, expected):
    row, right = _judged(family, name, data, dtype)
    assert right is expected, row


def test_a_bug_named_elsewhere_says_where_it_was_expected():
    row, _ = _judged("unet", "group_norm_epsilon", _report(False, module="attn"))
    assert row.module == "attn (expected `gn1`)" and row.verdict.startswith("FAILED: differs")
    row, _ = _judged("custom_op", "eps_outside_sqrt", _report(True))
    assert row.verdict == "passed (the bug is seen in float64 only)"


def test_each_case_runs_as_a_user_runs_it_with_its_reference(monkeypatch):
    commands = []

    def fake(command, **_):
        commands.append(command)
        return subprocess.CompletedProcess(command, 0, "PASSED\n", "")

    monkeypatch.setattr(zoo.subprocess, "run", fake)
    zoo.run_case("adamw", "numpy-fd", "float32", 0, 60.0, quantity="update", module="examples.port.adam")
    zoo.run_case("bert", "torch", "float32", 0, 60.0, quantity="output")
    zoo.run_case("bert", "torch", "float64", 1, 60.0)
    workloads = [command[command.index("--workload") + 1] for command in commands]
    assert workloads == ["examples.port.adam:adamw", "examples.port.zoo:bert", "examples.port.zoo:bert"]
    assert commands[0][commands[0].index("--quantity") + 1] == "update"
    assert commands[0][commands[0].index("--reference") + 1] == "numpy-fd"
    assert "--reference" not in commands[1]  # the forward check's one reference is PyTorch's forward
    assert "--quantity" not in commands[2] and commands[2][commands[2].index("--reference") + 1] == "torch"
