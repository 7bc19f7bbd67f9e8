"""A linen module's capture runs its forward pass as one ``jax.jit`` (issue 38's time: op by op, every new
operation was compiled on its own, ~73 compilations per dtype for one GPT-2 layer, 160 for a check of
GPT-2 small), each module call's values sent back as the compiled pass runs (``steps.later``): the same
records as op by op (names, classes, shapes, dtypes, ``narrow``), their values within a few units in the
last place (XLA fuses the compiled pass: a layer norm's reductions round otherwise); a float64 call back
arrives bit for bit (``steps._wired``); a model ``jax.jit`` cannot trace is captured op by op as before.
"""

from __future__ import annotations

import sys

import numpy as np
import pytest

import crosscheck

jax = pytest.importorskip("jax")
nn = pytest.importorskip("flax.linen")

import jax.numpy as jnp  # noqa: E402

from crosscheck._workloads import programs  # noqa: E402
from crosscheck._workloads.port.sides import jax_side, linen_side, steps  # noqa: E402
from tests.support.compiles import COMPILES  # noqa: E402

#: Odd sizes no other test uses: op by op, each operation of this model is compiled here first.
WIDTH, HIDDEN, LAYERS, ROWS = 13, 29, 5, 7


class Block(nn.Module):
    @nn.compact
    def __call__(self, x):
        h = nn.Dense(HIDDEN, name="fc1")(nn.LayerNorm(name="norm")(x))
        return x + nn.Dense(WIDTH, name="fc2")(jnp.tanh(h))


class Stack(nn.Module):
    branchy: bool = False  # Python control flow on a value: jax.jit cannot trace it

    @nn.compact
    def __call__(self, x):
        if self.branchy and not self.is_initializing() and float(jnp.sum(x)) > 1e9:
            x = -x
        for i in range(LAYERS):
            x = Block(name=f"blocks_{i}")(x)
        return nn.LayerNorm(name="norm")(x)


def _side(dtype, branchy=False):
    x = np.random.default_rng(0).standard_normal((ROWS, WIDTH)).astype(dtype)
    model = Stack(branchy=branchy)
    side = jax_side.JaxSide(model, None, None, {"x": x})
    variables = jax.jit(model.init)(jax.random.key(0), x)  # compiled whole: no operation compiled alone
    values = [np.asarray(v, dtype) for v in jax.tree_util.tree_leaves(variables)]
    return side, values, {"x": x}


def _capture(side, values, inputs, dtype, *, jit):
    with jax.enable_x64(dtype == np.float64):
        leaves = [jax.device_put(v) for v in values]
        xs = {k: jax.device_put(v) for k, v in inputs.items()}
        steps._decoding(steps._platform())  # the device's probe, once a process: not the model's compiles
        start = len(COMPILES)
        if jit is None:
            records = side.capture(leaves, xs, dtype)
        else:
            records = linen_side.capture(
                side, leaves, xs, dtype, jit=jit, numpy=jax_side._numpy, narrow=jax_side.narrow
            )
        return records, len(COMPILES) - start


def _same_records(a, b, rtol, atol):
    assert [(r.name, r.module_type, r.narrow) for r in a] == [(r.name, r.module_type, r.narrow) for r in b]
    for x, y in zip(a, b, strict=True):
        for u, v in zip(x.inputs + x.outputs, y.inputs + y.outputs, strict=True):
            assert u.shape == v.shape and u.dtype == v.dtype
            np.testing.assert_allclose(u, v, rtol=rtol, atol=atol)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_a_linen_capture_compiles_its_forward_once_and_records_what_op_by_op_did(dtype):
    side, values, inputs = _side(dtype)
    compiled, once = _capture(side, values, inputs, dtype, jit=None)
    stepwise, each = _capture(side, values, inputs, dtype, jit=False)
    assert once <= 1 < 10 < each  # op by op: every new operation (its shapes, its dtype) compiled alone
    names = [r.name for r in compiled]
    assert len(names) == 3 * LAYERS + LAYERS + 2 and names[-1] == "" and "blocks_4.fc2" in names
    if dtype == np.float64:  # not rounded to float32 on the way back, and the same to a few ulps
        _same_records(compiled, stepwise, rtol=1e-13, atol=1e-15)
        top = compiled[-1].outputs[0]
        assert not np.array_equal(top.astype(np.float32).astype(np.float64), top)
    else:
        _same_records(compiled, stepwise, rtol=2e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_a_second_capture_runs_the_pass_the_first_compiled(dtype):
    """A check captures the port again (a repeat, the gradient check's early captures): the same side
    in the same dtype runs the pass compiled the first time (each capture compiled its own)."""
    side, values, inputs = _side(dtype)
    first, once = _capture(side, values, inputs, dtype, jit=None)
    again, none = _capture(side, values, inputs, dtype, jit=None)
    assert (once, none) == (1, 0)
    _same_records(first, again, rtol=0, atol=0)


#: Read by ``Scaled`` while a capture's pass is traced (a module-level flag of the Flax code).
FACTOR = 1.0


class Scaled(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.Dense(WIDTH, name="fc")(x) * FACTOR


def test_the_next_check_traces_the_capture_afresh_and_compiles_only_a_changed_program(monkeypatch):
    """A side kept from one check to the next (a ``Port`` checked again in a notebook) is renewed by
    each check: its pass is traced afresh, so a flag the Flax code reads is read as it is now; the
    program compiled in the first check runs again where the trace is the same program."""
    x = np.random.default_rng(0).standard_normal((ROWS, WIDTH)).astype(np.float32)
    side = jax_side.JaxSide(Scaled(), None, None, {"x": x})
    values = [np.asarray(v) for v in jax.tree_util.tree_leaves(jax.jit(Scaled().init)(jax.random.key(0), x))]
    first, once = _capture(side, values, {"x": x}, np.float32, jit=None)
    side.renew()
    again, none = _capture(side, values, {"x": x}, np.float32, jit=None)
    assert (once, none) == (1, 0)  # the same program: not compiled again
    _same_records(first, again, rtol=0, atol=0)
    monkeypatch.setattr(sys.modules[__name__], "FACTOR", 2.0)
    side.renew()
    doubled, compiled = _capture(side, values, {"x": x}, np.float32, jit=None)
    assert compiled == 1
    assert [r.name for r in doubled] == ["fc", ""]
    np.testing.assert_array_equal(first[0].outputs[0], doubled[0].outputs[0])
    np.testing.assert_array_equal(2 * first[1].outputs[0], doubled[1].outputs[0])  # the flag, as it is


def test_a_recorders_call_back_says_what_its_program_holds():
    """Two programs alike but for a recorded module's name: each is compiled for itself, and the one
    compiled first, found again in a later check, says its own name (its call back reads what it says
    from its arguments, which the program's text holds)."""
    got: list = []
    kept = programs.Kept()
    for name in ("fc1", "fc2", "fc1"):

        def f(x, name=name):
            steps.later(name, "Dense", False, (x,), x * 2)
            return x + 1

        kept.renew()
        with steps.sink(lambda *record: got.append(record)):
            kept(f, jnp.ones(3))
    assert [r[0] for r in got] == ["fc1", "fc2", "fc1"]
    assert kept.compiled == 2


class Table(nn.Module):
    """A module whose output is known as the pass is traced (a NumPy table): no array of the pass."""

    @nn.compact
    def __call__(self, rows):
        return np.full((rows, WIDTH), 0.5)


class Tabled(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.Dense(WIDTH, name="fc")(x) + Table(name="table")(2).sum()


def test_a_record_made_while_tracing_is_in_every_capture():
    """A call whose values are known as the pass is traced is recorded then, not by the compiled pass: a
    pass run again would leave it out, so such a pass is compiled for each capture."""
    x = np.random.default_rng(0).standard_normal((ROWS, WIDTH)).astype(np.float32)
    side = jax_side.JaxSide(Tabled(), None, None, {"x": x})
    values = [np.asarray(v) for v in jax.tree_util.tree_leaves(jax.jit(Tabled().init)(jax.random.key(0), x))]
    for _ in range(2):
        records, _ = _capture(side, values, {"x": x}, np.float32, jit=None)
        assert [r.name for r in records] == ["table", "fc", ""]
        assert records[0].outputs[0].tolist() == np.full((2, WIDTH), 0.5).tolist()


def test_a_model_jit_cannot_trace_is_captured_op_by_op():
    side, values, inputs = _side(np.float32, branchy=True)
    records, _ = _capture(side, values, inputs, np.float32, jit=None)
    stepwise, _ = _capture(side, values, inputs, np.float32, jit=False)
    _same_records(records, stepwise, rtol=0, atol=0)
    with pytest.raises(jax.errors.ConcretizationTypeError):
        _capture(side, values, inputs, np.float32, jit=True)


def _odd_values() -> tuple[np.ndarray, np.ndarray]:
    payload = np.array([np.nan]).view(np.uint64) | np.uint64(5)
    return np.array([-0.0, 1e-310, 1 / 3, payload.view(np.float64)[0]]), np.array([2**60 + 1, -(2**62)])


def test_a_call_back_gets_float64_and_int64_bit_for_bit():
    got: list = []
    wide, ints = _odd_values()

    def f(x, i):
        steps.later("m", "M", False, (x, i), x * 1)
        return x

    with jax.enable_x64(True), steps.sink(lambda *record: got.append(record)):
        jax.jit(f)(jnp.asarray(wide), jnp.asarray(ints))
    ((name, kind, low, ins, outs, step),) = got
    assert (name, kind, low, step) == ("m", "M", False, None)
    x, i, y = (np.asarray(a) for a in (*ins, *outs))
    assert x.dtype == np.float64 and x.view(np.uint64).tolist() == wide.view(np.uint64).tolist()
    assert i.dtype == np.int64 and i.tolist() == ints.tolist()
    assert y.view(np.uint64)[:3].tolist() == wide.view(np.uint64)[:3].tolist()


@pytest.mark.parametrize("reverse", [False, True], ids=["forward", "reversed"])
def test_a_scans_call_backs_say_the_index_of_their_step_not_their_order(reverse):
    """Each call back says the index of the slice of ``xs`` its step got (a reversed scan runs index
    2 first); a step calling a module twice calls back twice with the same index. Outside
    ``indexed``, no index; inside, the scan's values are unchanged and ``jax.lax.scan`` is restored."""
    got: list = []
    original = jax.lax.scan

    def body(carry, x):
        steps.later("m", "M", False, (x,), x * 1)
        steps.later("m", "M", False, (x,), x * 2)
        return carry + x, x

    xs = jnp.arange(3.0) * 10
    with steps.sink(lambda *record: got.append(record)), steps.indexed():
        carry, ys = jax.lax.scan(body, 0.0, xs, reverse=reverse)
    assert jax.lax.scan is original
    assert float(carry) == 30.0 and ys.tolist() == xs.tolist()
    order = [2, 1, 0] if reverse else [0, 1, 2]
    assert [(r[5], float(r[3][0])) for r in got] == [((i,), 10.0 * i) for i in order for _ in (1, 2)]
    seen: dict = {}
    assert [steps.label(seen, "m", r[5]) for r in got[:2]] == [f"m@{order[0]}", f"m@{order[0]}#2"]


def test_what_a_call_back_is_handed_survives_a_device_put_without_x64():
    """JAX puts a call back's arguments on the device again in the thread that runs it (``device_put``),
    where x64 can be off (a large compiled pass runs in XLA's threads): a float64 array would be rounded
    to float32 there, as the first jitted capture of GPT-2 small's float64 records were."""
    wide, ints = _odd_values()
    for array in (wide, ints):
        with jax.enable_x64(True):
            sent = jnp.asarray(array)
            kind, wired = steps._kind(sent), steps._wired(sent)
        with jax.enable_x64(False):
            assert jax.device_put(np.asarray(sent)).dtype.itemsize == 4  # what the call back would get
            back = steps._unwired(jax.device_put(np.asarray(wired)), kind)
        assert back.dtype == array.dtype and back.view(np.uint64).tolist() == array.view(np.uint64).tolist()


def test_a_float32_array_is_sent_as_it_is():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    assert steps._kind(jnp.asarray(a)) is None and steps._wired(a) is a


def _tpu_words(array):
    """A TPU's ``_wired``: its float64 is two float32 words (high, then the rest), and a bitcast to
    ``uint32`` gives those words, not IEEE bits (seen on a TPU v5e: ``docs/measurements/accelerator.md``)."""
    if steps._kind(array) is None:
        return array
    if not jnp.issubdtype(array.dtype, jnp.floating):
        return jax.lax.bitcast_convert_type(array, jnp.uint32)
    high = array.astype(jnp.float32)
    low = (array - high.astype(array.dtype)).astype(jnp.float32)
    return jax.lax.bitcast_convert_type(jnp.stack([high, low], axis=-1), jnp.uint32)


def test_a_float64_capture_reads_a_tpus_float64_words_as_the_values_they_hold(monkeypatch):
    """Simulated: the device's words are float32 pairs. Read as IEEE bits they are garbage (every healthy
    port's float64 re-run on a TPU "not the same computation", up to 1e7 times float32's rounding); the
    probe finds the pairs and the records hold the device's values."""
    side, values, inputs = _side(np.float64)
    cpu, _ = _capture(side, values, inputs, np.float64, jit=True)
    monkeypatch.setattr(steps, "_wired", _tpu_words)
    monkeypatch.setattr(steps, "_FOUND", {})
    side = _side(np.float64)[0]  # the simulated device's own pass (a side keeps the one it compiled)
    tpu, _ = _capture(side, values, inputs, np.float64, jit=True)
    assert steps._FOUND == {jax.devices()[0].platform: {"f": "pair", "i": "ieee"}}
    _same_records(tpu, cpu, rtol=2.0**-44, atol=1e-300)


def test_words_no_decoding_reads_are_refused_in_a_sentence(monkeypatch):
    monkeypatch.setattr(steps, "_wired", lambda a: jax.lax.bitcast_convert_type(a * 3, jnp.uint32))
    monkeypatch.setattr(steps, "_FOUND", {})
    with pytest.raises(RuntimeError, match=r"8-byte floats cannot be read back from a `cpu` device"):
        with jax.enable_x64(True), steps.sink(lambda *record: None):
            pass


def test_a_capture_without_x64_probes_nothing(monkeypatch):
    """Without x64 no value is 8 bytes wide: a float32 capture compiles no probe of the device's words
    (two compilations of every float32 check's process); one under x64 probes its platform once."""
    monkeypatch.setattr(steps, "_FOUND", {})
    side, values, inputs = _side(np.float32)
    start = len(COMPILES)
    records = side.capture([jax.device_put(v) for v in values], inputs, np.float32)
    assert len(COMPILES) - start == 1 and steps._FOUND == {}  # the model's pass alone
    assert records[-1].name == "" and records[-1].outputs[0].dtype == np.float64  # records as ever
    with jax.enable_x64(True), steps.sink(lambda *record: None):
        pass
    assert list(steps._FOUND) == [jax.devices()[0].platform]


def _vmapped_branches_port(*, bug: bool = False):
    """Two parallel ``Linear`` + tanh branches summed, then a head: in PyTorch a ``ModuleList``, in
    linen one ``nn.vmap`` of the branch over stacked parameters (``bug``: the port's branch uses
    ``sin`` for ``tanh``)."""
    import flax.linen as nn
    import jax.numpy as jnp

    torch = pytest.importorskip("torch")
    width, branches = 4, 2

    class TorchNet(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.branches = torch.nn.ModuleList(torch.nn.Linear(width, width) for _ in range(branches))
            self.out = torch.nn.Linear(width, 2)

        def forward(self, x):
            return self.out(sum(torch.tanh(b(x)) for b in self.branches))

    class Branch(nn.Module):
        @nn.compact
        def __call__(self, x):
            return (jnp.sin if bug else jnp.tanh)(nn.Dense(width, name="linear")(x))

    class Net(nn.Module):
        @nn.compact
        def __call__(self, x):
            vmapped = nn.vmap(
                Branch,
                variable_axes={"params": 0},
                split_rngs={"params": True},
                in_axes=None,
                out_axes=0,
                axis_size=branches,
            )
            return nn.Dense(2, name="out")(vmapped(name="branches")(x).sum(0))

    torch.manual_seed(0)
    x = np.random.default_rng(0).standard_normal((3, width))
    return crosscheck.Port(name="vmapped", torch=TorchNet().eval(), jax=Net(), inputs={"x": x})


LEFT_OUT = "only the output is compared: the linen model's submodule calls could not be captured"


@pytest.mark.parametrize("reference", [None, "torch"], ids=["oracle", "torch-reference"])
def test_a_linen_port_with_nn_vmap_over_branches_is_judged_on_its_output_and_gradients(reference):
    """It crashed with TracerArrayConversionError: a submodule's values under ``nn.vmap`` are batched
    tracers. Module by module is left out, said; the output and the gradients are judged."""
    options = {"reference": reference, "backends": ["jax"]} if reference else {}
    report = crosscheck.check(_vmapped_branches_port(), **options)
    assert report.passed, report.problems
    said = report.to_dict()["backends"]["jax"]["notes"]["port"]["text"]
    assert said.startswith("the output and every gradient agree") and LEFT_OUT in said, said
    assert "TracerArrayConversionError" not in said


def test_a_bug_in_a_vmapped_branch_still_fails_on_the_output():
    report = crosscheck.check(_vmapped_branches_port(bug=True), reference="torch", backends=["jax"])
    assert not report.passed
    said = report.to_dict()["backends"]["jax"]["notes"]["port"]["text"]
    assert LEFT_OUT in said and "TracerArrayConversionError" not in said, said


def _mlp(params, x):
    """A function of a parameter pytree, listing its hidden layer (``jax_intermediates``)."""
    h = jnp.tanh(x @ params["w1"])
    return h @ params["w2"], {"hidden": h}


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_a_functions_capture_is_one_compiled_pass_kept_per_precision(dtype):
    """A function's (or an Equinox module's) capture runs its call as one ``jax.jit``, kept for the
    side's next capture in that dtype (it ran an operation at a time, each new one compiled alone); the
    records are those of the call run as it is written, to a few units in the last place."""
    rng = np.random.default_rng(0)
    params = {"w1": rng.standard_normal((WIDTH, HIDDEN)), "w2": rng.standard_normal((HIDDEN, 3))}
    x = rng.standard_normal((ROWS, WIDTH)).astype(dtype)
    side = jax_side.JaxSide(_mlp, params, lambda f, inputs: f(**inputs), {"x": x}, ["hidden"])
    values = [np.asarray(v, dtype) for v in jax.tree_util.tree_leaves(params)]
    with jax.enable_x64(dtype == np.float64):
        leaves, xs = [jax.device_put(v) for v in values], {"x": jax.device_put(x)}
        steps._decoding(steps._platform())
        start = len(COMPILES)
        first = side.capture(leaves, xs, dtype)
        once = len(COMPILES) - start
        again = side.capture(leaves, xs, dtype)
        assert (once, len(COMPILES) - start - once) == (1, 0)
        out, found = side.run(leaves, xs, dtype)  # as it is written
    assert [r.name for r in first] == [r.name for r in again] == ["hidden", ""]
    rtol = 1e-13 if dtype == np.float64 else 2e-6
    np.testing.assert_allclose(first[0].outputs[0], np.asarray(found["hidden"]), rtol=rtol, atol=1e-6)
    np.testing.assert_allclose(first[1].outputs[0], np.asarray(out), rtol=rtol, atol=1e-6)
    _same_records(first, again, rtol=0, atol=0)
