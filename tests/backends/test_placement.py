"""A side's placement as a framework declares it (``Setting``) and as a run chooses it (``Placement``, one
record per framework; ``crosscheck._backends.placements``): its options as a user gives them, what the
classification's re-runs ask of it, and each front door that fills it from the declarations."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

import crosscheck
from crosscheck._backends import DECLARED, as_options, declared_settings, framework_named, placements
from crosscheck._backends.placement import Placement, Setting

SETTINGS = (
    Setting("device", ("default", "cpu", "gpu"), "where", host="cpu"),
    Setting("tf32", ("default", "on", "off"), "products", highest="off"),
    Setting("deterministic", ("default", "on"), "sums"),
)


def test_a_record_fills_each_setting_left_out_with_its_default():
    record = Placement("toy", SETTINGS, {"tf32": "on"})
    assert record.values == {"device": "default", "tf32": "on", "deterministic": "default"}
    assert record.options() == {"toy_device": "default", "toy_tf32": "on", "toy_deterministic": "default"}
    assert record.chosen() == {"toy_tf32": "on"} and not record.left_alone
    assert Placement("toy", SETTINGS).left_alone and Placement("toy", SETTINGS).chosen() == {}
    assert record.key == "toy_settings"


def test_highest_and_host_change_only_the_settings_that_have_such_a_value():
    record = Placement("toy", SETTINGS, {"tf32": "on", "deterministic": "on"})
    assert record.at_highest().values == {"device": "default", "tf32": "off", "deterministic": "on"}
    assert record.on_host().values == {"device": "cpu", "tf32": "on", "deterministic": "on"}
    assert record.on_host().at_highest().values == {"device": "cpu", "tf32": "off", "deterministic": "on"}


def test_a_framework_without_such_a_value_is_left_as_it_is():
    record = Placement("toy", (Setting("device", ("default", "gpu"), "where"),), {"device": "gpu"})
    assert record.at_highest() == record and record.on_host() == record


TORCH_OPTIONS = ["torch_device", "torch_matmul_tf32", "torch_cudnn_tf32", "torch_deterministic"]


def test_the_declarations_are_the_settings_the_front_doors_give():
    jax_options = ["jax_platform", "jax_precision", "jax_deterministic"]
    assert [name for name, _ in declared_settings()] == [*jax_options, *TORCH_OPTIONS]
    jax, torch = placements()
    assert jax.framework == "jax" and jax.left_alone and torch.framework == "torch" and torch.left_alone
    assert jax.on_host().options() == {
        "jax_platform": "cpu",
        "jax_precision": "default",
        "jax_deterministic": "default",
    }
    assert jax.at_highest().options() == {
        "jax_platform": "default",
        "jax_precision": "highest",
        "jax_deterministic": "default",
    }
    # PyTorch's highest arithmetic is its TF32 off, for products and convolutions; its host the CPU
    assert torch.at_highest().chosen() == {"torch_matmul_tf32": "off", "torch_cudnn_tf32": "off"}
    assert torch.on_host().chosen() == {"torch_device": "cpu"}
    assert framework_named("jax").title == "JAX" and framework_named("torch").title == "PyTorch"


def test_placements_take_the_options_a_user_gives_and_give_them_back():
    options = {"jax_platform": "cpu", "jax_precision": "high", "repeat": 2}  # an Execution's fields
    torch = dict.fromkeys(TORCH_OPTIONS, "default")
    jax = {"jax_deterministic": "default", **torch}
    assert as_options(placements(options)) == {"jax_platform": "cpu", "jax_precision": "high", **jax}
    assert as_options(placements()) == {"jax_platform": "default", "jax_precision": "default", **jax}


def test_an_executions_placement_is_its_fields_of_each_declared_setting():
    execution = crosscheck.Execution(jax_platform="cpu", jax_precision="highest", torch_device="cpu")
    given = {"jax_platform": "cpu", "jax_precision": "highest", "torch_device": "cpu"}
    assert execution.placement == placements(given)


@pytest.mark.parametrize(
    "front",
    ["Execution", "sweep", "check_blocks"],
)
def test_every_declared_setting_is_a_keyword_of_each_front_door(front):
    """A framework's new setting is given where the others are: a field of ``Execution`` and a keyword of
    the sweep and the blockwise check (the command line's options and the configuration's keys follow
    from the declarations)."""
    from crosscheck._sweep.blocks import check_blocks
    from crosscheck._sweep.engine import sweep

    if front == "Execution":
        names = {field.name: field.default for field in dataclasses.fields(crosscheck.Execution)}
    else:
        function = {"sweep": sweep, "check_blocks": check_blocks}[front]
        names = {n: p.default for n, p in inspect.signature(function).parameters.items()}
    for name, setting in declared_settings():
        assert names.get(name) == setting.default, f"{front} lacks `{name}` (default {setting.default!r})"


def test_every_setting_says_what_it_is_and_its_values_are_choices():
    for framework in DECLARED:
        for setting in framework.placement:
            assert setting.help and setting.default in setting.choices
            assert {setting.highest, setting.host} - {None} <= set(setting.choices)


def test_a_front_doors_keywords_give_its_placement_each_declared_setting_checked():
    """The one function ``sweep`` and ``check_blocks`` build their cases' placement with."""
    from crosscheck._records import placement_keywords

    given = {**dict.fromkeys((name for name, _ in declared_settings()), "default"), "jobs": 2}
    given["torch_device"] = "cpu"
    found = placement_keywords(given)
    assert found == {name: given[name] for name, _ in declared_settings()}  # the settings alone
    with pytest.raises(ValueError, match="`torch_device` must be one of default, cpu, cuda"):
        placement_keywords({**given, "torch_device": "tpu"})
    with pytest.raises(KeyError):  # a front door without a setting's keyword, never left out unsaid
        placement_keywords({k: v for k, v in given.items() if k != "jax_precision"})
