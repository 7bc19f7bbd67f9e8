"""An Equinox port's cotangents (``sides/equinox_cotangents.py``): on the Equinox twin of the custom op
example (``examples/port/custom_op_equinox.py``), the gradient reaching each module's output and the one
leaving its first input are PyTorch's, the custom op is found at ``norm`` only, and the side, the user's
module classes and ``jax.vmap`` are left as they were; a layer mapped by ``jax.vmap`` itself is perturbed
outside the map, any other call under ``jax.vmap`` (around the model and a scan in it, too) is not and
is said; a scan's steps are perturbed one by one; and a record whose arrays have fewer entries than
PyTorch's is not paired."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("equinox")


def _both(port, dtype="float64"):
    """Both sides' cotangents of ``port`` at one point in ``dtype`` (``backward``'s captures)."""
    import jax

    from crosscheck._workloads.port.declare.build import output_layouts, torch_implementation
    from crosscheck._workloads.port.judge import backward
    from crosscheck._workloads.port.sides import torch_cotangents

    prepared = port.prepared
    output_layouts(prepared)
    params, inputs = prepared.workload.generate(np.random.default_rng(1), dtype)
    params = {k: v.astype(dtype) for k, v in params.items()}
    torch_got = torch_cotangents.cotangents(
        prepared.torch_side, torch_implementation(prepared), dict(params), dict(inputs)
    )
    with jax.enable_x64(dtype == "float64"):
        jax_got = backward.jax_chains(prepared, dict(params), dict(inputs))
    return prepared, torch_got, jax_got


@pytest.fixture(scope="module")
def healthy():
    """The healthy Equinox custom op example's cotangents, and its side and classes before them."""
    import jax

    from examples.port import custom_op_equinox

    port = custom_op_equinox.port
    side = port.prepared.jax_side
    before = side.treedef, side.static, {k: type(v) for k, v in vars(side.model).items()}, jax.vmap
    return (*_both(port), before)


def _agree(theirs, mine, pairs):
    for t, j in pairs.items():
        for a, b in ((theirs[t].outputs[0], mine[j].outputs[0]), (theirs[t].inputs[0], mine[j].inputs[0])):
            assert a.shape == b.shape and np.abs(a).max() > 0, (t, j)
            assert np.abs(a - b).max() <= 1e-12 * np.abs(a).max(), (t, j)


def test_each_equinox_module_s_cotangents_are_pytorch_s(healthy):
    _, (torch_records, _), (jax_records, _, mapped), _ = healthy
    theirs, mine = {r.name: r for r in torch_records}, {r.name: r for r in jax_records}
    assert list(mine) == ["fc1", "norm", "fc2"]  # the order the calls finished; the GELU is a function
    assert [mine[n].module_type for n in mine] == ["Linear", "FusedRMSNorm", "Linear"]
    assert mapped == {}
    for name in mine:
        assert len(mine[name].outputs) == len(mine[name].inputs) == 1
    _agree(theirs, mine, {n: n for n in mine})


def test_the_equinox_custom_op_is_found_at_norm_only(healthy):
    _, _, (_, custom, _), _ = healthy
    assert custom == {"norm": ("jax.custom_vjp",)}


def test_the_side_the_user_s_classes_and_jax_vmap_are_left_as_they_were(healthy):
    import jax

    prepared, _, _, (treedef, static, classes, vmap) = healthy
    side = prepared.jax_side
    assert side.treedef is treedef and side.static is static
    assert {k: type(v) for k, v in vars(side.model).items()} == classes
    assert jax.vmap is vmap


def test_a_layer_mapped_by_jax_vmap_itself_is_perturbed_outside_the_map_on_the_batch():
    """``jax.vmap(jax.vmap(self.fc1))(x)``: ``fc1``'s call on the batch, its gradients PyTorch's."""
    from examples.port import custom_op_equinox

    healthy = custom_op_equinox.make_port("custom-op-equinox-layers-vmapped-healthy", vmap="layers")
    _, (torch_records, _), (jax_records, custom, mapped) = _both(healthy)
    mine = {r.name: r for r in jax_records}
    assert list(mine) == ["fc1", "norm", "fc2"] and mapped == {}
    assert custom == {"norm": ("jax.custom_vjp",)}
    _agree({r.name: r for r in torch_records}, mine, {n: n for n in mine})


def test_a_scan_under_jax_vmap_perturbs_none_of_its_calls():
    """``jax.vmap`` around the model, a ``jax.lax.scan`` inside it: the step's calls see no vmap tracer
    (the scan's body is traced on its own), and are left out all the same."""
    from tests.support import scanned

    _, _, (jax_records, _, mapped) = _both(scanned.port("equinox"), "float32")
    assert jax_records == [] and mapped == {"layers.linear": "jax.vmap"}


def test_a_scan_s_steps_are_perturbed_one_by_one():
    from tests.support import scanned

    _, (torch_records, _), (jax_records, _, mapped) = _both(scanned.port("equinox-batched"))
    mine = {r.name: r for r in jax_records}
    assert sorted(mine) == sorted(
        [f"layers.linear@{i}" for i in range(4)] + [f"layers@{i}" for i in range(4)]
    )
    assert mapped == {}
    theirs = {r.name: r for r in torch_records}
    _agree(theirs, mine, {f"layers.{i}.linear": f"layers.linear@{i}" for i in range(4)})


def test_a_record_with_fewer_entries_than_pytorch_s_is_not_paired():
    from crosscheck._workloads.port.judge import backward, localize
    from crosscheck._workloads.port.sides.torch_side import ModuleCall
    from examples.port import custom_op_equinox

    batch, one = np.ones((2, 5, 16)), np.ones((16,))
    torch_runs = localize.Runs([ModuleCall("norm", "FusedRMSNorm", (batch,), (batch,))], ())
    found = backward.Chains(
        torch_runs, localize.Runs([ModuleCall("norm", "FusedRMSNorm", (one,), (one,))], ())
    )
    got = backward._equinox(found, custom_op_equinox.port.prepared, [])
    assert (got.torch, got.paired) == (None, None)
    assert got.problem.startswith("no submodule call of the Equinox module pairs with a PyTorch module's")
    same = backward.Chains(
        torch_runs, localize.Runs([ModuleCall("norm", "FusedRMSNorm", (batch,), (batch,))], ())
    )
    assert backward._equinox(same, custom_op_equinox.port.prepared, []).paired == {"norm": "norm"}


def test_calls_under_filter_vmap_another_map_or_a_loop_traced_once_for_its_steps_are_left_out_and_named():
    """``eqx.filter_vmap``, ``jax.vmap`` of a function that calls the module or over another axis,
    ``jax.lax.fori_loop`` and ``jax.lax.map`` trace their body once for every example or step: they
    are said with their transform; the plain call and ``jax.vmap`` of the module itself over the leading
    axes are perturbed, the latter on the batch; ``jax.vmap`` and the loops are restored after."""
    import equinox as eqx
    import jax
    import jax.numpy as jnp

    from crosscheck._workloads.port.sides import equinox_cotangents, perturbations, steps

    class Scale(eqx.Module):
        w: jax.Array

        def __call__(self, x):
            return x * self.w

    class Model(eqx.Module):
        a: Scale
        b: Scale
        c: Scale
        d: Scale
        e: Scale
        f: Scale
        g: Scale

        def __call__(self, x):
            h = eqx.filter_vmap(self.a)(x)
            h = jax.lax.fori_loop(0, 2, lambda i, v: self.b(v), h)
            h = jax.lax.map(self.c, h)
            h = jax.vmap(lambda v: self.e(v))(self.d(h))
            h = jax.vmap(self.f, in_axes=1, out_axes=1)(h)
            return jax.vmap(jax.vmap(self.g))(h[None])

    model = equinox_cotangents._marked(Model(*(Scale(jnp.ones(())) for _ in range(7))), ())
    before = jax.vmap, jax.lax.map, jax.lax.fori_loop, jax.lax.while_loop
    seen, shapes = equinox_cotangents.Seen(), {}
    with steps.indexed(), equinox_cotangents.intercept(seen)(perturbations.Calls(None, shapes)):
        jax.eval_shape(model, jnp.ones((2, 3)))
    assert list(shapes) == ["d", "g"]
    assert shapes["g"].first.shape == (1, 2, 3) and shapes["g"].outputs[0].shape == (1, 2, 3)
    assert seen.mapped == {
        "a": "jax.vmap",
        "b": "jax.lax.fori_loop",
        "c": "jax.lax.map",
        "e": "jax.vmap",
        "f": "jax.vmap",
    }
    assert (jax.vmap, jax.lax.map, jax.lax.fori_loop, jax.lax.while_loop) == before
    assert type(model.d).__name__ == "Scale" and type(model.d) is not Scale and isinstance(model.d, Scale)
