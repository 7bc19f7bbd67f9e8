"""The blockwise check (``crosscheck.Blocks``, ``crosscheck.check_blocks``, ``crosscheck blocks``): each
block checked as a port on its recorded inputs and cotangent, the first block that differs named with
the module inside it; a block whose check did not happen fails the whole check; a Dask LocalCluster
gives the same verdicts as this process; bad input is one line."""

from __future__ import annotations

import json
import os

import blocks_tiny  # tests/support/: imports no framework until a model is asked for
import numpy as np
import pytest
from paths import ROOT

import crosscheck
from crosscheck._cli.main import main

pytest.importorskip("torch")
pytest.importorskip("flax")

SUPPORT = ROOT / "tests" / "support"


def _verdicts(result):
    return [(r["block"], r["status"], r["module"]) for r in result.records]


@pytest.fixture(scope="module")
def planted():
    """The tiny model with its block ``blocks.1``'s port scaling a hidden layer, checked here."""
    return crosscheck.check_blocks("blocks_tiny:planted", reference="torch")


def test_healthy_blocks_pass_each_checked_as_a_port():
    result = crosscheck.check_blocks(blocks_tiny.make(), reference="torch")
    assert result.passed, result.lines()
    assert [r["block"] for r in result.records] == ["blocks.0", "blocks.1", "blocks.2"]
    assert all(r["status"] == "passed" and r["seconds"] > 0 for r in result.records)
    # each block ran as the port `name[block]`, its own report in its record
    assert result.records[1]["report"]["case"]["workload"] == "tiny-blocks[blocks.1]"
    assert result.first is None and result.verdict().startswith("PASSED")
    assert "wiring between blocks" in result.lines()[-1]  # what a blockwise check cannot see, said


def test_a_bug_in_one_block_fails_naming_that_block_and_the_others_pass(planted):
    assert not planted.passed
    assert [(b, s) for b, s, _ in _verdicts(planted)] == [
        ("blocks.0", "passed"),
        ("blocks.1", "failed"),
        ("blocks.2", "passed"),
    ]
    assert planted.first["block"] == "blocks.1"
    # the scale sits in the block's own code between fc1 and fc2: the port verdict says so
    assert planted.first["module"] == "blocks.1"
    assert "between `fc1` and `fc2`" in planted.first["verdict"]
    assert planted.verdict().startswith("FAILED: the first block that differs is `blocks.1`")


def test_a_bug_in_a_module_of_a_block_names_the_module_in_the_models_names():
    blocks = blocks_tiny.make(bug_in="blocks.2", bug="epsilon")
    result = crosscheck.check_blocks(blocks, reference="torch")
    assert not result.passed
    assert result.first["block"] == "blocks.2"
    assert result.first["module"] == "blocks.2.ln"
    assert [r["passed"] for r in result.records] == [True, True, False]


def test_a_float64_check_of_the_blocks_passes_and_catches_the_bug():
    result = crosscheck.check_blocks(blocks_tiny.make(bug_in="blocks.1"), reference="torch", dtype="float64")
    assert [r["passed"] for r in result.records] == [True, False, True]
    assert result.options["dtype"] == "float64"
    assert result.records[0]["report"]["backends"]["jax"]["dtype"] == "float64"


def test_random_cotangents_catch_the_bug_too():
    blocks = blocks_tiny.make(bug_in="blocks.1")
    random = crosscheck.Blocks(**{**_fields(blocks), "cotangent": "random"})
    result = crosscheck.check_blocks(random, reference="torch")
    assert [r["passed"] for r in result.records] == [True, False, True]


def _fields(blocks):
    import dataclasses

    return {f.name: getattr(blocks, f.name) for f in dataclasses.fields(blocks)}


def test_a_block_whose_port_cannot_be_built_fails_the_check_and_the_rest_run():
    result = crosscheck.check_blocks(blocks_tiny.make(port_error="blocks.0"), reference="torch")
    assert not result.passed
    first = result.first
    assert (first["block"], first["status"]) == ("blocks.0", "error")
    assert "RuntimeError: the port of this block cannot be built" in first["error"]
    assert [r["status"] for r in result.records[1:]] == ["passed", "passed"]
    assert "was not checked is `blocks.0`" in result.verdict()


def test_a_block_with_an_unmapped_weight_never_passes():
    result = crosscheck.check_blocks(blocks_tiny.make(unmapped=True), reference="torch")
    assert not result.passed
    assert all(not r["passed"] for r in result.records)


def test_a_matched_module_the_forward_never_calls_is_not_checked_and_fails():
    # `*` matches the top modules: `embed`, `blocks` (a ModuleList, never called) and `head`
    result = crosscheck.check_blocks(blocks_tiny.make(pattern="*"), reference="torch")
    assert not result.passed
    never = next(r for r in result.records if r["block"] == "blocks")
    assert never["status"] == "error"
    assert "never called" in never["error"]


def test_the_recorded_cotangent_is_the_models_loss_gradient_at_the_block(tmp_path):
    import torch

    from crosscheck._workloads.losses import outputs_loss
    from crosscheck._workloads.port.blocks.record import load, record

    blocks = blocks_tiny.make()
    model = blocks.model()
    entries = record(blocks, model, str(tmp_path), seed=0, weights=False)
    x = torch.as_tensor(np.random.default_rng(0).standard_normal((5, 3)).astype("float32"))
    h = model.embed(x)
    outs = []
    for block in model.blocks:
        h = block(h)
        outs.append(h)
    want = torch.autograd.grad(outputs_loss(model.head(h)), outs)
    for entry, grad in zip(entries, want, strict=True):
        got = load(entry["path"])
        np.testing.assert_array_equal(got.cotangents[0], grad.numpy())
        assert got.constants == {"scale": None} and list(got.inputs) == ["x"]


@pytest.fixture(scope="module")
def cluster():
    """A Dask LocalCluster, 2 worker processes of 1 thread each, that imports tests/support/."""
    distributed = pytest.importorskip("distributed")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYTHONPATH", os.pathsep.join([str(SUPPORT), str(ROOT), os.environ.get("PYTHONPATH", "")]))
        with distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0"
        ) as local:
            yield local


def test_a_dask_cluster_gives_the_same_verdicts_each_worker_a_block(planted, cluster, tmp_path):
    result = crosscheck.check_blocks(
        "blocks_tiny:planted", reference="torch", scheduler=cluster.scheduler_address, directory=str(tmp_path)
    )
    assert result.engine["kind"] == "dask"
    # a worker that built the whole model would fail its block (blocks_tiny's model refuses a worker)
    assert _verdicts(result) == _verdicts(planted)
    assert result.first["block"] == "blocks.1" and not result.passed
    # the workers built their blocks alone from the recorded weights (saved only for a cluster)
    from crosscheck._workloads.port.blocks.record import load

    assert set(load(str(tmp_path / "block-00001.npz")).weights) == {
        "ln.weight",
        "ln.bias",
        "fc1.weight",
        "fc1.bias",
        "fc2.weight",
        "fc2.bias",
    }


def test_a_cluster_needs_the_blocks_by_import_string():
    with pytest.raises(ValueError, match="import string"):
        crosscheck.check_blocks(blocks_tiny.make(), scheduler="tcp://127.0.0.1:1")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"pattern": "layers.*"}, "no module of the model matches `blocks` 'layers.*'"),
        ({"pattern": "blocks.9"}, "no module of the model matches `blocks` 'blocks.9'"),
    ],
    ids=["no-match", "no-such-block"],
)
def test_a_pattern_that_matches_no_module_is_one_line(change, message):
    with pytest.raises(ValueError, match=message) as info:
        crosscheck.check_blocks(blocks_tiny.make(**change))
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"blocks": ""}, "`blocks` must be a pattern"),
        ({"port": 3}, "`port` must be callable"),
        ({"cotangent": "mean"}, "`cotangent` must be one of model, random"),
        ({"torch": 3}, "`torch` must be a torch.nn.Module or a function"),
    ],
    ids=["empty-pattern", "port", "cotangent", "torch"],
)
def test_bad_fields_are_refused_in_one_line(fields, message):
    with pytest.raises((TypeError, ValueError), match=message):
        crosscheck.Blocks(**{**_fields(blocks_tiny.make()), **fields})


def test_a_port_factory_may_not_set_what_the_check_sets():
    blocks = crosscheck.Blocks(**{**_fields(blocks_tiny.make()), "port": lambda i, n, b: {"loss": abs}})
    result = crosscheck.check_blocks(blocks, reference="torch")
    assert not result.passed
    assert "may not set `loss`" in result.first["error"]


def test_blocks_given_where_one_workload_is_expected_say_how_to_run_them():
    with pytest.raises(ValueError, match=r"crosscheck.Blocks, checked block by block: run it with"):
        crosscheck.check(blocks_tiny.make())


def test_the_command_names_the_block_and_writes_json(tmp_path, capsys):
    out = tmp_path / "blocks.json"
    status = main(["blocks", "--workload", "blocks_tiny:planted", "--reference", "torch", "--json", str(out)])
    assert status == 1
    printed = capsys.readouterr().out
    assert "verdict: FAILED: the first block that differs is `blocks.1`" in printed
    assert "\n  blocks.1  FAILED   `jax`: the forward pass differs first" in printed  # one line a block
    data = json.loads(out.read_text())
    assert data["passed"] is False and data["first"] == "blocks.1"
    assert [b["status"] for b in data["blocks"]] == ["passed", "failed", "passed"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["blocks", "--workload", "stack"], "must be an import string"),
        (["blocks", "--workload", "blocks_tiny:nothing"], "blocks_tiny:nothing"),
        (["run", "--workload", "blocks_tiny:healthy", "--no-isolate"], "crosscheck blocks --workload"),
        (["blocks", "--workload", "blocks_tiny:healthy", "--scheduler", "nowhere"], "--scheduler"),
    ],
    ids=["not-an-import-string", "missing-attribute", "run-a-blocks", "bad-scheduler"],
)
def test_usage_errors_are_one_line(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_the_gpt2_example_names_the_block_and_module_of_its_planted_bug():
    pytest.importorskip("transformers")
    from examples.port import gpt2_blocks

    result = crosscheck.check_blocks("examples.port.gpt2_blocks:gelu_exact", reference="torch")
    what, module, _ = gpt2_blocks.BUGS["gelu_exact"]
    assert [r["passed"] for r in result.records] == [True, False, True], what
    assert result.first["module"] == module


def test_the_json_report_never_overwrites_the_blocks_own_source(tmp_path, capsys, monkeypatch):
    source = tmp_path / "myblocks.py"  # the user's module, not this repository's
    source.write_text("from blocks_tiny import make\n\nhealthy = make()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    before = source.read_bytes()
    argv = ["blocks", "--workload", "myblocks:healthy", "--reference", "torch", "--json", str(source)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "cannot write `--json`" in err and "the source of `myblocks:healthy`" in err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert source.read_bytes() == before


@pytest.mark.parametrize("what", ["missing", "file"])
def test_a_directory_that_is_no_folder_is_one_line(what, tmp_path, capsys):
    given = tmp_path / "nowhere"
    if what == "file":
        given.write_text("not a folder")
    argv = ["blocks", "--workload", "blocks_tiny:healthy", "--reference", "torch", "--directory", str(given)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"`--directory` {given}" in err
    said = "no such folder" if what == "missing" else "it is a file, not a folder"
    assert said in err
    assert err.count("\n") == 1 and "Traceback" not in err
    with pytest.raises(ValueError, match=f"`directory` .*{said}"):
        crosscheck.check_blocks(blocks_tiny.make(), reference="torch", directory=str(given))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--backend", "torch"], "`--backend torch` with `--reference numpy-fd` never runs the port, `jax`"),
        (
            ["--backend", "jax", "--reference", "jax"],
            "`--backend jax` with `--reference jax` compares `jax` with",
        ),
        (["--backend", "torch", "--reference", "torch"], "never runs the port, `jax`"),
    ],
    ids=["torch-alone", "jax-against-jax", "torch-against-torch"],
)
def test_a_check_that_does_not_compare_the_port_with_the_original_is_refused(options, message, capsys):
    assert main(["blocks", "--workload", "blocks_tiny:planted", *options]) == 2
    err = capsys.readouterr().err
    assert message in err and "compares each ported block (`jax`) with its PyTorch block (`torch`)" in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_the_api_refuses_it_in_its_own_words():
    with pytest.raises(ValueError, match=r"`backends=\['jax'\]` with `reference='jax'` compares `jax` with"):
        crosscheck.check_blocks(blocks_tiny.make(), backends=["jax"], reference="jax")


def test_with_jax_as_the_reference_a_disagreement_does_not_say_which_side_is_wrong():
    result = crosscheck.check_blocks("blocks_tiny:planted", backends=["torch"], reference="jax")
    assert [r["status"] for r in result.records] == ["passed", "failed", "passed"]
    said = result.first["verdict"]
    # run's own words: with no oracle, a disagreement between two backends blames neither
    assert "no oracle ran (`--reference jax`), so which of the two is wrong is unknown" in said
    assert "which of the two is wrong is unknown" in result.verdict()


@pytest.fixture(scope="module")
def threads_cluster():
    """A Dask LocalCluster of threads in this process: the same tasks, workers and rebuilt blocks as a
    cluster of processes (``cluster``), started in a second."""
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(
        n_workers=1, threads_per_worker=1, processes=False, protocol="tcp", dashboard_address=":0"
    ) as local:
        yield local


def test_a_rebuilt_block_that_is_not_the_models_block_fails_by_name(threads_cluster, tmp_path):
    # the port and `torch_block` both forget the layer index: the rebuilt blocks agree with the ports,
    # but they are not the model's blocks `blocks.1` and `blocks.2`, so their checks do not count
    result = crosscheck.check_blocks(
        "blocks_tiny:forgetful",
        reference="torch",
        scheduler=threads_cluster.scheduler_address,
        directory=str(tmp_path),
    )
    assert result.engine["kind"] == "dask" and not result.passed
    assert [(r["block"], r["status"]) for r in result.records] == [
        ("blocks.0", "passed"),
        ("blocks.1", "error"),
        ("blocks.2", "error"),
    ]
    said = result.first["error"]
    assert (
        "`torch_block(1, 'blocks.1')` is not the model's block: on the recorded inputs its output 0" in said
    )
    assert result.verdict().startswith("FAILED: the first block that was not checked is `blocks.1`")


def test_the_same_forgetful_port_fails_in_process_where_the_models_blocks_are_used():
    result = crosscheck.check_blocks("blocks_tiny:forgetful", reference="torch")
    assert [(r["block"], r["status"]) for r in result.records] == [
        ("blocks.0", "passed"),
        ("blocks.1", "failed"),
        ("blocks.2", "failed"),
    ]


def test_blocks_rebuilt_right_are_proven_and_pass_on_the_cluster(threads_cluster, tmp_path):
    result = crosscheck.check_blocks(
        "blocks_tiny:layered",
        reference="torch",
        scheduler=threads_cluster.scheduler_address,
        directory=str(tmp_path),
    )
    assert result.passed, result.lines()
    # a wrong rebuild under a right port is refused too, not reported as the port's difference
    wrong = crosscheck.check_blocks(
        "blocks_tiny:rebuilt_wrong",
        reference="torch",
        scheduler=threads_cluster.scheduler_address,
        directory=str(tmp_path),
    )
    assert [r["status"] for r in wrong.records] == ["passed", "error", "error"]
    assert "is not the model's block" in wrong.first["error"]


def test_a_rebuilt_weight_one_ulp_away_is_not_the_models(tmp_path):
    import torch

    from crosscheck._workloads.port.blocks.proof import prove_rebuilt
    from crosscheck._workloads.port.blocks.record import load, record

    blocks = blocks_tiny.make()
    entries = record(blocks, blocks.model(), str(tmp_path), seed=0, weights=True)
    recorded = load(entries[1]["path"])
    module = blocks.torch_block(1, "blocks.1")
    module.load_state_dict({k: torch.as_tensor(v) for k, v in recorded.weights.items()})
    prove_rebuilt("the block", recorded, module.eval())  # the model's: no error
    with torch.no_grad():
        module.fc1.weight[0, 0] = torch.nextafter(module.fc1.weight[0, 0], torch.tensor(2.0))
    with pytest.raises(
        ValueError, match=r"the block is not the model's block: its `fc1.weight` .* bit for bit"
    ):
        prove_rebuilt("the block", recorded, module)


def test_a_rebuilt_block_whose_backward_is_not_the_models_fails_by_name_on_the_cluster(
    threads_cluster, tmp_path
):
    # The model's blocks take tanh's derivative as 1; `torch_block` builds them with tanh's own: the
    # same weights and forward, bit for bit, and a backward that agrees with the port's.
    result = crosscheck.check_blocks(
        "blocks_tiny:straight_through",
        reference="torch",
        scheduler=threads_cluster.scheduler_address,
        directory=str(tmp_path),
    )
    assert result.engine["kind"] == "dask" and not result.passed
    assert [r["status"] for r in result.records] == ["error", "error", "error"]
    said = result.first["error"]
    rebuilt = "`torch_block(0, 'blocks.0')` is not the model's block"
    assert f"{rebuilt}: on the recorded inputs its gradient" in said
    assert "with respect to its parameter `ln.weight` differs from the model's block's" in said
    assert "a straight-through estimator?" in said


def test_the_same_straight_through_model_fails_in_process_where_the_models_blocks_are_used():
    result = crosscheck.check_blocks("blocks_tiny:straight_through", reference="torch")
    assert [r["status"] for r in result.records] == ["failed", "failed", "failed"]


@pytest.mark.parametrize("cotangent", ["model", "random"])
def test_a_rebuilt_backward_is_proven_bit_for_bit_at_the_checks_own_loss(tmp_path, cotangent):
    import dataclasses

    from crosscheck._workloads.port.blocks.proof import prove_rebuilt
    from crosscheck._workloads.port.blocks.record import load, record

    blocks = dataclasses.replace(blocks_tiny.make(straight_through=True), cotangent=cotangent)
    entries = record(blocks, blocks.model(), str(tmp_path), seed=0, weights=True)
    recorded = load(entries[1]["path"])
    assert recorded.cotangent == cotangent
    assert set(recorded.backward) >= {"weight/fc1.weight", "input/x"}
    block, _ = blocks_tiny._classes()
    state = {k: torch_tensor(v) for k, v in recorded.weights.items()}
    straight = block(None, True)
    straight.load_state_dict(state)
    prove_rebuilt("the block", recorded, straight.eval())  # the model's: no error
    plain = block()
    plain.load_state_dict(state)
    with pytest.raises(ValueError, match=r"its gradient with respect to its parameter `ln.weight` differs"):
        prove_rebuilt("the block", recorded, plain.eval())


def test_a_block_whose_gradient_could_not_be_recorded_is_not_proven(tmp_path, monkeypatch):
    from crosscheck._workloads.port.blocks import record as record_module
    from crosscheck._workloads.port.blocks.proof import prove_rebuilt

    def fails(recorded, module):
        raise RuntimeError("no backward here")

    monkeypatch.setattr(record_module, "backward", fails)
    blocks = blocks_tiny.make()
    entries = record_module.record(blocks, blocks.model(), str(tmp_path), seed=0, weights=True)
    recorded = record_module.load(entries[0]["path"])
    module = blocks.torch_block(0, "blocks.0")
    module.load_state_dict({k: torch_tensor(v) for k, v in recorded.weights.items()})
    with pytest.raises(ValueError, match=r"cannot be proven the model's block: its gradient at the recorded"):
        prove_rebuilt("the block", recorded, module.eval())


def torch_tensor(array):
    import torch

    return torch.as_tensor(array)


@pytest.fixture
def released():
    """Lets a hanging block's thread end once the test is done."""
    blocks_tiny.RELEASE.clear()
    yield
    blocks_tiny.RELEASE.set()


def test_a_block_past_its_time_limit_fails_by_name_and_the_checked_blocks_are_reported(
    released, tmp_path, capsys, monkeypatch
):
    seen = []

    class Recorder:  # the command's progress display: what it was told, as blocks finished
        def __enter__(self):
            return lambda what, done, total: seen.append((what, done, total))

        def __exit__(self, *exc):
            return None

    monkeypatch.setattr("crosscheck._cli.blocks.progress_display", Recorder)
    out = tmp_path / "blocks.json"
    # 20 s: ten times what a tiny block takes here, on a loaded machine
    argv = ["blocks", "--workload", "blocks_tiny:hanging", "--reference", "torch", "--timeout", "20"]
    assert main([*argv, "--json", str(out)]) == 1
    printed = capsys.readouterr().out
    assert "\n  blocks.0  PASSED " in printed and "\n  blocks.2  PASSED " in printed
    assert "\n  blocks.1  TIMEOUT  not checked: it did not finish within 20 s (its time limit)" in printed
    assert "verdict: FAILED: the first block that was not checked is `blocks.1`" in printed
    assert seen == [("blocks", 1, 3), ("blocks", 2, 3), ("blocks", 3, 3)]
    data = json.loads(out.read_text())
    assert [b["status"] for b in data["blocks"]] == ["passed", "timeout", "passed"]
    assert data["options"]["timeout"] == 20


@pytest.mark.parametrize("value", [0, -1.0, float("nan")], ids=["zero", "negative", "nan"])
def test_a_time_limit_that_is_no_positive_number_is_one_line(value, capsys):
    argv = ["blocks", "--workload", "blocks_tiny:healthy", "--reference", "torch", "--timeout", str(value)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "`--timeout` must be a positive number of seconds" in err and err.count("\n") == 1
    with pytest.raises(ValueError, match="`timeout` must be a positive number of seconds"):
        crosscheck.check_blocks(blocks_tiny.make(), reference="torch", timeout=value)


def test_a_block_past_its_time_limit_on_a_worker_fails_by_name_too(released, threads_cluster, tmp_path):
    result = crosscheck.check_blocks(
        "blocks_tiny:hanging",
        reference="torch",
        scheduler=threads_cluster.scheduler_address,
        directory=str(tmp_path),
        timeout=20,  # ten times what a tiny block takes here, on a loaded machine
    )
    assert [(r["block"], r["status"]) for r in result.records] == [
        ("blocks.0", "passed"),
        ("blocks.1", "timeout"),
        ("blocks.2", "passed"),
    ]
    assert result.first["error"] == "not checked: it did not finish within 20 s (its time limit)"


def test_each_blocks_jax_side_runs_with_the_settings_chosen_for_it(capsys):
    """``jax_platform`` and ``jax_precision`` reach every block's port (its report says where its JAX
    side ran and at what precision); the command refuses a bad value as the API does."""
    result = crosscheck.check_blocks(
        blocks_tiny.make(), reference="torch", jax_platform="cpu", jax_precision="highest"
    )
    assert result.passed, result.lines()
    for record in result.records:
        report = record["report"]
        assert report["jax_settings"] == {
            "jax_platform": "cpu",
            "jax_precision": "highest",
            "jax_deterministic": "default",
        }
        jax_side = next(b for b in report["backends"].values() if b["info"].get("framework") == "jax")
        assert (jax_side["platform"], jax_side["info"]["matmul_precision"]) == ("cpu", "highest")
    with pytest.raises(ValueError, match=r"^`jax_precision` must be one of default, high, highest"):
        crosscheck.check_blocks(blocks_tiny.make(), jax_precision="fast")
    assert main(["blocks", "--workload", "blocks_tiny:planted", "--jax-precision", "fast"]) == 2
    assert capsys.readouterr().err.startswith("crosscheck: error: `--jax-precision` must be one of default")
