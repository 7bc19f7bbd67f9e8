"""One card, two frameworks (simulated: CI has no GPU): where the PyTorch side is placed on a card by
name and JAX's is not on the host, JAX's preallocation is turned off before JAX first uses a device (its
default takes 75 % of the card), unless the user set JAX's allocator, and the report's environment says
so; a case whose estimate cannot fit the card's free memory is refused before anything is allocated,
with its estimate."""

from __future__ import annotations

import pytest

import crosscheck
from crosscheck._backends import placements
from crosscheck._engine.plan import MemoryTooLarge, check_cards, prepare

jax_state = pytest.importorskip("crosscheck.backends.jax.state")
torch_state = pytest.importorskip("crosscheck.backends.torch.state")

PREALLOCATE = "XLA_PYTHON_CLIENT_PREALLOCATE"


@pytest.fixture
def bare_allocator(monkeypatch):
    """No allocator setting given (each restored after the test), nothing said yet."""
    for name in jax_state.ALLOCATOR:
        monkeypatch.setenv(name, "x")  # recorded, so that teardown restores the value before
        monkeypatch.delenv(name)
    monkeypatch.setattr(jax_state, "SHARED", [])


@pytest.fixture
def a_card(monkeypatch):
    """PyTorch's side may be placed on a simulated card with 1 MiB free."""
    monkeypatch.setattr(torch_state, "unavailable", lambda placement: "")
    card = ("cuda:0 (Simulated H200)", 2**20)
    monkeypatch.setattr(torch_state, "device_memory", lambda p: card if p.value("device") == "cuda" else None)


def test_a_side_placed_on_a_card_by_name_is_off_the_host():
    jax, torch = placements({"torch_device": "cuda"})
    assert torch.off_host and not jax.off_host
    assert not any(r.off_host for r in placements({"torch_device": "cpu", "jax_platform": "cpu"}))
    assert not any(r.off_host for r in placements())


def test_both_sides_on_one_card_turn_jaxs_preallocation_off_and_say_so(bare_allocator):
    import os

    said = prepare(placements({"torch_device": "cuda"}))
    assert os.environ[PREALLOCATE] == "false"
    assert len(said) == 1 and said[0].startswith("JAX's preallocation turned off")
    assert "75 %" in said[0] and jax_state.SHARED == said


def test_jax_on_the_host_or_the_users_allocator_is_left_as_it_is(bare_allocator, monkeypatch):
    import os

    assert prepare(placements({"torch_device": "cuda", "jax_platform": "cpu"})) == []
    assert prepare(placements()) == [] and PREALLOCATE not in os.environ
    monkeypatch.setenv("XLA_PYTHON_CLIENT_MEM_FRACTION", ".4")
    (said,) = prepare(placements({"torch_device": "cuda"}))
    assert said.startswith("JAX's allocator as given (XLA_PYTHON_CLIENT_MEM_FRACTION=.4)")
    assert PREALLOCATE not in os.environ and jax_state.SHARED == []


def test_a_case_that_cannot_fit_the_card_is_refused_with_its_estimate(a_card):
    placement = placements({"torch_device": "cuda"})
    check_cards({"weights": 2**19}, placement)  # fits
    with pytest.raises(
        MemoryTooLarge, match=r"needs about .* \(weights .*\), more than the .* free on cuda:0"
    ):
        check_cards({"weights": 2**21}, placement)
    check_cards({"weights": 2**21}, placements({"torch_device": "cpu"}))  # the host: not the card's


def test_a_check_too_large_for_the_card_is_refused_before_it_starts(a_card, bare_allocator):
    execution = crosscheck.Execution(isolate=False, torch_device="cuda")
    stack = crosscheck.Stack(layers=4, batch=64, dim=128)
    with pytest.raises(
        ValueError, match=r"free on cuda:0 \(Simulated H200\), where the PyTorch side is placed"
    ):
        crosscheck.check(stack, execution=execution, backends=["torch"])


def test_the_reports_environment_says_what_was_set(a_card, bare_allocator, monkeypatch):
    pytest.importorskip("jax")
    monkeypatch.setattr(torch_state, "device_memory", lambda p: ("cuda:0 (Simulated H200)", 2**40))
    execution = crosscheck.Execution(isolate=False, torch_device="cuda")
    report = crosscheck.check(crosscheck.Stack(layers=1, batch=2, dim=3), execution=execution)
    assert report.environment["jax"]["allocator"].startswith("JAX's preallocation turned off")


class _OnACard:
    """A workload whose PyTorch side's own code lives on a card (a port's module on ``cuda:0``)."""

    def homes(self):
        return {"torch": "cuda:0"}


def test_a_side_whose_module_lives_on_a_card_shares_it_as_one_placed_by_name(bare_allocator):
    import os

    from crosscheck._engine.plan import at_home

    jax, torch = at_home(placements(), _OnACard())
    assert torch.value("device") == "cuda" and torch.off_host and jax.left_alone
    said = prepare((jax, torch))
    assert os.environ[PREALLOCATE] == "false" and said[0].startswith("JAX's preallocation turned off")
    # a device the run named is kept; a workload that says nothing changes nothing
    assert at_home(placements({"torch_device": "cpu"}), _OnACard())[1].value("device") == "cpu"
    assert at_home(placements(), object()) == placements()


def test_a_ports_homes_are_where_its_module_lives():
    from crosscheck._engine.plan import at_home
    from crosscheck._workloads.port.judge.workload import PortWorkload
    from examples.port import convnet

    assert PortWorkload(convnet.port).homes() == {}  # on the host
    port = convnet.make_port("convnet-meta")
    port.prepared.torch_side.m.to("meta")  # another device than the host's, without a card
    assert PortWorkload(port).homes() == {"torch": "meta"}
    assert at_home(placements(), PortWorkload(port))[1].value("device") == "default"  # not a card


def test_each_card_must_fit_the_shares_of_the_sides_computing_there(a_card):
    """Per device: the PyTorch side's share on its card, the JAX side's there too unless on the host."""
    shares = {"torch": 600_000, "jax": 600_000}
    whole = {"weights": 2**30}  # the host's estimate: not the card's
    check_cards(whole, placements({"torch_device": "cuda", "jax_platform": "cpu"}), shares)  # fits
    with pytest.raises(MemoryTooLarge) as refused:
        check_cards(whole, placements({"torch_device": "cuda"}), shares)
    said = str(refused.value)
    assert "(the PyTorch side's 586 KiB, the JAX side's 586 KiB), more than the 1 MiB free on cuda:0" in said
    assert "needs about 1.14 MiB" in said
    check_cards(whole, placements({"torch_device": "cpu"}), shares)  # no card: nothing to fit


def test_a_port_whose_module_is_on_a_card_is_refused_before_it_starts_when_it_cannot_fit(
    a_card, bare_allocator, monkeypatch
):
    """Without ``--torch-device``: the module's own card is checked, as for one placed there by name."""
    import torch

    from crosscheck._workloads.port.sides import torch_device
    from examples.port import convnet

    monkeypatch.setattr(torch_device, "device_of", lambda module: torch.device("cuda", 0))
    monkeypatch.setattr(torch_state, "device_memory", lambda p: ("cuda:0 (Simulated H200)", 64))
    with pytest.raises(MemoryTooLarge) as refused:
        crosscheck.check(convnet.port, execution=crosscheck.Execution(isolate=False), reference="torch")
    said = str(refused.value)
    assert "(the PyTorch side's 8.81 KiB, the JAX side's 8.81 KiB), more than the 64 B free on cuda:0" in said
