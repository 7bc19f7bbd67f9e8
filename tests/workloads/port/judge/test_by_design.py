"""A float64 check of an original that computes a part in float32 by design (``by_design``): a timestep
embedding computed in float32 on both sides (diffusers' ``Timesteps`` and its Flax twin), or a position
table the original keeps in float32 (``test_float32_constants``). The part and what it feeds are judged
at float32's rounding, the verdict says so, and the healthy port passes; a real difference still fails,
and a port module in float32 where the original's is not still fails (``test_locate``)."""

from __future__ import annotations

import numpy as np
import pytest

import crosscheck

torch = pytest.importorskip("torch")
jax = pytest.importorskip("jax")
nn = pytest.importorskip("flax.linen")

B, D = 3, 8
INPUTS = {
    "x": np.random.default_rng(0).standard_normal((B, 4)),
    "t": np.array([10, 500, 999], np.int32),
}


def timestep_port(base=10000.0, scale=1.0):
    """PyTorch: ``fc1(x) + time_fc(time_proj(t))``, tanh, ``fc2``; ``time_proj`` computes its sinusoidal
    embedding in float32 whatever the case's dtype, as diffusers' ``Timesteps`` does; Flax mirrors it,
    in float32 too, with ``jnp.sin``'s own rounding. ``base`` and ``scale``: planted bugs in the port
    (the embedding's frequency base; ``fc2``'s input scaled)."""
    import jax.numpy as jnp

    class TimeProj(torch.nn.Module):
        def forward(self, t):
            freqs = torch.exp(-np.log(10000.0) * torch.arange(D // 2, dtype=torch.float32) / (D // 2))
            angle = t.float()[:, None] * freqs[None, :]
            return torch.cat([torch.sin(angle), torch.cos(angle)], dim=-1)

    class TorchNet(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.time_proj = torch.nn.Linear(4, D), TimeProj()
            self.time_fc, self.fc2 = torch.nn.Linear(D, D), torch.nn.Linear(D, 2)

        def forward(self, x, t):
            emb = self.time_proj(t).to(x.dtype)
            return self.fc2(torch.tanh(self.fc1(x) + self.time_fc(emb)))

    class FlaxTimeProj(nn.Module):
        def __call__(self, t):
            freqs = jnp.exp(-np.log(base) * jnp.arange(D // 2, dtype=jnp.float32) / (D // 2))
            angle = t.astype(jnp.float32)[:, None] * freqs[None, :]
            return jnp.concatenate([jnp.sin(angle), jnp.cos(angle)], axis=-1)

    class FlaxNet(nn.Module):
        def setup(self):
            self.fc1, self.time_proj = nn.Dense(D), FlaxTimeProj()
            self.time_fc, self.fc2 = nn.Dense(D), nn.Dense(2)

        def __call__(self, x, t):
            emb = self.time_proj(t).astype(x.dtype)
            return self.fc2(scale * jnp.tanh(self.fc1(x) + self.time_fc(emb)))

    torch.manual_seed(0)
    return crosscheck.Port(name="timestep", torch=TorchNet().eval(), jax=FlaxNet(), inputs=INPUTS)


@pytest.mark.parametrize("reference", ["torch", "numpy-fd"])
def test_a_timestep_embedding_in_float32_on_both_sides_passes_in_float64_and_is_said(reference):
    # before: FAILED at `time_proj`: "computes in float32 in a float64 check ... build it in the case's
    # dtype", advice the user cannot follow (the original does the same)
    report = crosscheck.check(timestep_port(), dtype="float64", reference=reference)
    assert report.passed, report.problems
    text = report.backends["jax"].notes["port"]["text"]
    assert "the original computes in float32 by design: `time_proj` (its output is float32)" in text
    assert "judged at float32's rounding" in text and "computes in float32 in a float64 check" not in text
    assert "float32's rounding" in report.backends["jax"].notes["rounding"]


@pytest.mark.parametrize(
    ("planted", "module"),
    [({"base": 1000.0}, "time_proj"), ({"scale": 1.0 + 1e-4}, "")],  # "": the top module's own code
    ids=["base", "scale"],
)
def test_a_real_difference_still_fails_at_its_module(planted, module):
    report = crosscheck.check(timestep_port(**planted), dtype="float64", reference="torch")
    assert not report.passed
    verdict = report.backends["jax"].notes["port"]
    assert verdict["module"] == module, verdict["text"]


def test_a_float32_check_has_no_such_part():
    report = crosscheck.check(timestep_port(), dtype="float32", reference="torch")
    assert report.passed, report.problems
    assert "by design" not in report.backends["jax"].notes["port"]["text"]


def test_the_forward_check_judges_it_the_same_way():
    report = crosscheck.check(timestep_port(), dtype="float64", quantity="output")
    assert report.passed, report.problems
    assert "`time_proj` (its output is float32)" in report.backends["jax"].notes["port"]["text"]


def zoo_port(name, *, one_layer=(), **change):
    """The zoo's ``name`` (``examples/port/zoo``: Hugging Face's PyTorch model against its shipped Flax
    module, transformers 4.57, a tiny random config), each config key of ``one_layer`` set to 1 on both
    sides (fast); ``change``: a planted bug (``make_port``'s ``flax_config``, ``jax_inputs``)."""
    pytest.importorskip("transformers")
    from examples.port.zoo import ARCHS, make_port

    arch = ARCHS[name]
    smaller = dict.fromkeys(one_layer, 1)
    flax_config = {**smaller, **change.pop("flax_config", {})}
    return make_port(arch, torch_config=smaller, flax_config=flax_config, **change)


def xglm_port(**flax_config):
    """Hugging Face's XGLM: PyTorch keeps its sinusoidal position table in float32 (a buffer), Flax builds
    it in float64; ``flax_config``: a planted bug (the tanh GELU for the exact one)."""
    return zoo_port("xglm", flax_config=flax_config)


def test_a_healthy_xglm_passes_in_float64_its_position_table_judged_at_float32s_rounding():
    # before: FAILED at `embed_positions`: "a float32 constant in a float64 check ...; build it in
    # float64 on the PyTorch side to check in float64, or check in float32"
    report = crosscheck.check(xglm_port(), dtype="float64", reference="torch")
    assert report.passed, report.problems
    text = report.backends["jax"].notes["port"]["text"]
    assert "the original computes in float32 by design: `embed_positions` (" in text
    assert "constants kept in float32" in text


def test_a_bug_in_xglm_still_fails_in_float64():
    # where it is blamed is the boundaries' judgement (`embed_tokens`, scaled on the other side of its
    # edge, is named once a difference reaches it), not this one's
    report = crosscheck.check(xglm_port(activation_function="gelu_new"), dtype="float64", reference="torch")
    assert not report.passed
    assert report.backends["jax"].notes["port"]["starts_in"] == "forward"


SEQ2SEQ_ONE = ("encoder_layers", "decoder_layers")


@pytest.mark.parametrize(
    ("name", "one_layer", "parts"),
    [
        ("marian", SEQ2SEQ_ONE, ["encoder.embed_positions", "decoder.embed_positions"]),
        ("pegasus", SEQ2SEQ_ONE, ["encoder.embed_positions", "decoder.embed_positions"]),
        ("roformer", ("num_hidden_layers",), ["encoder.embed_positions"]),
    ],
)
def test_a_healthy_model_with_a_float32_position_table_passes_in_float64_and_says_which(
    name, one_layer, parts
):
    # Marian's and Pegasus's tables are frozen parameters, RoFormer's feeds its rotary attention; each
    # failed in float64 at its table before it was judged a part computed in float32 by design
    report = crosscheck.check(zoo_port(name, one_layer=one_layer), dtype="float64", reference="torch")
    assert report.passed, report.problems
    text = report.backends["jax"].notes["port"]["text"]
    said = [f"`{part}` (it holds `{part}.weight`, constants kept in float32)" for part in parts]
    assert all(s in text for s in said) and "judged at float32's rounding" in text, text


def _marian_positions_from_one(inputs):
    from examples.port.zoo import inputs as io

    return io.with_positions(inputs, start=1, decoder_start=1)


def test_a_position_offset_in_marian_still_fails_in_float64_in_the_ports_own_code():
    # Flax's Marian looks its table up in its own call (no module of its own): the verdict names the
    # top module's code, before `encoder.embed_positions`, as it does for BART's offset in float32
    port = zoo_port("marian", one_layer=SEQ2SEQ_ONE, jax_inputs=_marian_positions_from_one)
    report = crosscheck.check(port, dtype="float64", reference="torch")
    assert not report.passed
    verdict = report.backends["jax"].notes["port"]
    assert verdict["starts_in"] == "forward" and verdict["module"] == "", verdict["text"]
