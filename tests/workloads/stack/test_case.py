"""Cases: validation, bit-for-bit determinism, the inits; validation and loading of user arrays."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import pickle

import numpy as np
import pytest

from crosscheck import Case, make_inputs
from crosscheck._compare.constants import DTYPES
from crosscheck._files import load_array
from crosscheck._workloads.stack.case import INITS, check_inputs

# -- Case validation -----------------------------------------------------------------------------------

BAD_CASES = [
    # (fields, error type, the field the message names, what the message shows was found)
    ({"layers": 0}, ValueError, "layers", "found 0"),
    ({"layers": -1}, ValueError, "layers", "found -1"),
    ({"layers": 2.0}, TypeError, "layers", "found 2.0"),
    ({"layers": True}, TypeError, "layers", "found True"),
    ({"layers": "8"}, TypeError, "layers", "found '8'"),
    ({"batch": 0}, ValueError, "batch", "found 0"),
    ({"batch": None}, TypeError, "batch", "found None"),
    ({"dim": 0}, ValueError, "dim", "found 0"),
    ({"dim": 1.5}, TypeError, "dim", "found 1.5"),
    ({"seed": -1}, ValueError, "seed", "found -1"),
    ({"seed": 0.5}, TypeError, "seed", "found 0.5"),
    ({"dtype": "int8"}, ValueError, "dtype", "found 'int8'"),
    ({"dtype": "float8"}, ValueError, "dtype", "found 'float8'"),
    ({"init": "zeros"}, ValueError, "init", "found 'zeros'"),
    ({"scale": 0.0}, ValueError, "scale", "found 0.0"),
    ({"scale": -2.0}, ValueError, "scale", "found -2.0"),
    ({"scale": float("nan")}, ValueError, "scale", "found nan"),
    ({"scale": float("inf")}, ValueError, "scale", "found inf"),
    ({"scale": "1"}, TypeError, "scale", "found '1'"),
]


@pytest.mark.parametrize(
    ("fields", "error", "field", "found"),
    BAD_CASES,
    ids=[
        "layers-0",
        "layers-negative",
        "layers-float",
        "layers-bool",
        "layers-str",
        "batch-0",
        "batch-none",
        "dim-0",
        "dim-float",
        "seed-negative",
        "seed-float",
        "dtype-int8",
        "dtype-float8",
        "init-unknown",
        "scale-0",
        "scale-negative",
        "scale-nan",
        "scale-inf",
        "scale-str",
    ],
)
def test_bad_case_names_the_field(fields, error, field, found):
    with pytest.raises(error, match=f"`{field}`") as exc:
        Case(**fields)
    assert found in str(exc.value)


def test_bad_choices_list_the_valid_values():
    with pytest.raises(ValueError, match="float32, float64"):
        Case(dtype="int8")
    with pytest.raises(ValueError, match=", ".join(INITS)):
        Case(init="zeros")


@pytest.mark.parametrize(
    "fields",
    [{}, {"layers": 1, "batch": 1, "dim": 1}, {"seed": np.int64(3), "scale": np.float32(0.5)}],
    ids=["defaults", "smallest", "numpy-scalars"],
)
def test_case_round_trips_through_json(fields):
    case = Case(**fields)
    assert Case(**json.loads(json.dumps(case.to_dict()))) == case


def test_case_is_frozen():
    case = Case()
    with pytest.raises(dataclasses.FrozenInstanceError):
        case.seed = 1  # type: ignore[misc]


def test_defaults_are_the_design():
    assert Case().to_dict() == {
        "layers": 8,
        "batch": 8,
        "dim": 16,
        "dtype": "float32",
        "seed": 0,
        "init": "gaussian",
        "scale": 1.0,
    }


# -- determinism ---------------------------------------------------------------------------------------

ALL_CASES = [
    Case(layers=layers, batch=3, dim=4, dtype=dtype, seed=5, init=init)
    for init in INITS
    for dtype in DTYPES
    for layers in (1, 3)
]
ALL_IDS = [f"{c.init}-{c.dtype}-L{c.layers}" for c in ALL_CASES]


def _digest(*arrays: np.ndarray) -> str:
    # Little-endian bytes, so that the digest means the same on every machine.
    data = b"".join(np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("<")).tobytes() for a in arrays)
    return hashlib.sha256(data).hexdigest()


@pytest.mark.parametrize("case", ALL_CASES, ids=ALL_IDS)
def test_same_case_same_bits(case):
    first = make_inputs(case)
    second = make_inputs(Case(**case.to_dict()))
    for a, b in zip(first, second, strict=True):
        assert a.tobytes() == b.tobytes()
    assert _digest(*first) == _digest(*second)


#: Pinned digests: the same case gives the same arrays on every machine and with every release.
GOLDEN = [
    (
        Case(layers=2, batch=3, dim=4, seed=7),
        "df8497ea51d29e9bde4447116d7e7f8ccf13aad12a363192eef7d3992012b25e",
    ),
    (
        Case(layers=2, batch=3, dim=4, seed=7, dtype="float64"),
        "aa7f30acc711fb5d90f87e67113e836b88f78de3cdfccb515a678bc300fccf7f",
    ),
    (
        Case(layers=3, batch=4, dim=5, seed=3, init="integer"),
        "0d3d72d84cbaad7811212ed5da0ad462a59b0e8dbdb8902d554dfdb69a769ce4",
    ),
    (
        Case(layers=3, batch=4, dim=5, seed=3, init="nearzero"),
        "dc1a3b790de43cc7123ac32cb3493206606f5ab1eacc3830a49c7b57bb64a9b6",
    ),
    (Case(), "d3c1d2b8ae42729746ba25a0a8f04c0120da3938c1c7bbb00b6c77090cfb06c6"),
]


@pytest.mark.parametrize(
    ("case", "digest"),
    GOLDEN,
    ids=["gaussian-float32", "gaussian-float64", "integer", "nearzero", "defaults"],
)
def test_known_bits(case, digest):
    assert _digest(*make_inputs(case)) == digest


@pytest.mark.parametrize("field", ["seed", "layers"], ids=["seed", "layers"])
def test_different_cases_different_arrays(field):
    case = Case(layers=2, batch=3, dim=4)
    other = dataclasses.replace(case, **{field: getattr(case, field) + 1})
    assert _digest(*make_inputs(case)) != _digest(*make_inputs(other))


@pytest.mark.parametrize("case", ALL_CASES, ids=ALL_IDS)
def test_shapes_and_dtypes(case):
    weights, x = make_inputs(case)
    assert weights.shape == (case.layers, case.dim, case.dim)
    assert x.shape == (case.batch, case.dim)
    assert weights.dtype == x.dtype == np.dtype(case.dtype)
    assert weights.flags.writeable
    assert x.flags.writeable
    assert np.all(np.isfinite(weights))
    assert np.all(np.isfinite(x))


@pytest.mark.parametrize("init", ["gaussian", "nearzero"], ids=["gaussian", "nearzero"])
def test_float32_is_float64_rounded_once(init):
    single = make_inputs(Case(layers=2, batch=3, dim=4, seed=1, init=init, dtype="float32"))
    double = make_inputs(Case(layers=2, batch=3, dim=4, seed=1, init=init, dtype="float64"))
    for a, b in zip(single, double, strict=True):
        np.testing.assert_array_equal(a, b.astype(np.float32), strict=True)


# -- the inits -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPES)
@pytest.mark.parametrize("scale", [1.0, 2.5], ids=["scale-1", "scale-2.5"])
def test_identity_init(dtype, scale):
    weights, x = make_inputs(Case(layers=3, batch=2, dim=4, dtype=dtype, init="identity", scale=scale))
    np.testing.assert_array_equal(weights, np.broadcast_to(np.eye(4, dtype=dtype), (3, 4, 4)), strict=True)
    np.testing.assert_array_equal(x, np.full((2, 4), scale, dtype=dtype), strict=True)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPES)
def test_integer_init(dtype):
    weights, x = make_inputs(Case(layers=8, batch=8, dim=16, seed=6, dtype=dtype, init="integer"))
    assert set(np.unique(weights)) <= {-1.0, 0.0, 1.0}
    assert set(np.unique(x)) <= {-2.0, -1.0, 0.0, 1.0, 2.0}
    assert len(np.unique(weights)) == 3


def test_integer_init_gives_exact_zero_pre_activations():
    weights, x = make_inputs(Case(layers=8, batch=8, dim=16, seed=6, init="integer"))
    y, zeros = x, 0
    for w in weights:
        z = y @ w
        assert np.array_equal(z, np.round(z))  # float32 computes the integers exactly
        zeros += np.count_nonzero(z == 0)
        y = np.maximum(z, 0)
    assert zeros > 0


def test_nearzero_init_is_integers_nudged():
    weights, x = make_inputs(Case(layers=3, batch=4, dim=5, seed=3, init="nearzero", dtype="float64"))
    nudge = np.abs(weights - np.round(weights))
    assert np.all(nudge <= 2.0**-23)
    assert np.count_nonzero(nudge) > weights.size // 2
    assert np.array_equal(x, np.round(x))


def test_scale_multiplies_x_only():
    base = make_inputs(Case(layers=2, batch=3, dim=4, seed=2, dtype="float64"))
    scaled = make_inputs(Case(layers=2, batch=3, dim=4, seed=2, dtype="float64", scale=4.0))
    np.testing.assert_array_equal(scaled[0], base[0])
    np.testing.assert_array_equal(scaled[1], 4.0 * base[1])


# -- check_inputs --------------------------------------------------------------------------------------

W = np.ones((2, 3, 3), np.float32)
X = np.ones((4, 3), np.float32)

BAD_INPUTS = [
    # (weights, x, message fragments)
    (np.ones((3, 3), np.float32), X, ["`weights`", "(L, d, d)", "(3, 3)"]),
    (np.ones((2, 3, 4), np.float32), X, ["`weights`", "(L, d, d)", "(2, 3, 4)"]),
    (W, np.ones(3, np.float32), ["`x`", "(N, d)", "(3,)"]),
    (W, np.ones((4, 5), np.float32), ["`x`", "(N, 3)", "(4, 5)"]),
    (np.ones((0, 3, 3), np.float32), X, ["must not be empty", "(0, 3, 3)"]),
    (W, np.ones((0, 3), np.float32), ["must not be empty", "(0, 3)"]),
    (np.ones((2, 3, 3), np.int32), X, ["`weights`", "float32 or float64", "int32"]),
    (W, np.ones((4, 3), np.float16), ["`x`", "float32 or float64", "float16"]),
    (W, np.ones((4, 3), np.complex64), ["`x`", "float32 or float64", "complex64"]),
    (W, np.ones((4, 3), bool), ["`x`", "float32 or float64", "bool"]),
    (np.where(np.eye(3, dtype=bool), np.nan, W), X, ["`weights`", "finite", "6 NaN or infinite"]),
    (W, np.full((4, 3), -np.inf, np.float32), ["`x`", "finite", "12 NaN or infinite"]),
    (W, np.ones((4, 3), np.float64), ["share one dtype", "float32 and float64"]),
    (np.array([[["a"]]]), np.array([["b"]]), ["`weights`", "float32 or float64", "found str"]),
]


@pytest.mark.parametrize(
    ("weights", "x", "fragments"),
    BAD_INPUTS,
    ids=[
        "weights-rank-2",
        "weights-not-square",
        "x-rank-1",
        "x-wrong-width",
        "weights-empty",
        "x-empty",
        "weights-int",
        "x-float16",
        "x-complex",
        "x-bool",
        "weights-nan",
        "x-inf",
        "mixed-dtypes",
        "strings",
    ],
)
def test_check_inputs_errors(weights, x, fragments):
    with pytest.raises(ValueError, match="must") as exc:
        check_inputs(weights, x)
    for fragment in fragments:
        assert fragment in str(exc.value)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPES)
def test_check_inputs_returns_the_same_arrays(dtype):
    weights, x = W.astype(dtype), X.astype(dtype)
    checked = check_inputs(weights, x)
    assert checked[0] is weights
    assert checked[1] is x


def test_check_inputs_accepts_nested_lists():
    weights, x = check_inputs([[[1.0, 0.0], [0.0, 1.0]]], [[1.0, 2.0]])
    assert weights.shape == (1, 2, 2)
    assert x.shape == (1, 2)
    assert weights.dtype == x.dtype == np.float64


# -- load_array ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("filename", "save", "name"),
    [
        ("a.npy", lambda path, a: np.save(path, a), "weights"),
        ("a.npz", lambda path, a: np.savez(path, a), "weights"),
        ("a.npz", lambda path, a: np.savez_compressed(path, anything=a), "x"),
        ("a.npz", lambda path, a: np.savez(path, weights=a, x=a[0]), "weights"),
        ("a.npz", lambda path, a: np.savez(path, weights=a[0], x=a), "x"),
    ],
    ids=["npy", "npz", "npz-compressed", "npz-named-weights", "npz-named-x"],
)
def test_load_array(tmp_path, filename, save, name):
    array = np.arange(18, dtype=np.float32).reshape(2, 3, 3)
    save(tmp_path / filename, array)
    np.testing.assert_array_equal(load_array(tmp_path / filename, name=name), array, strict=True)


def _object_npy(path):
    np.save(path, np.array([{"a": 1}, None], dtype=object), allow_pickle=True)


def _object_npz(path):
    np.savez(path, a=np.array([{"a": 1}, None], dtype=object))


def _pickle(path):
    path.write_bytes(pickle.dumps(np.ones(3)))


def _random_bytes(path):
    path.write_bytes(b"\x00" + np.random.default_rng(0).bytes(255))


def _empty(path):
    path.write_bytes(b"")


def _truncated(path):
    np.save(path, np.ones((2, 3, 3)))
    path.write_bytes(path.read_bytes()[:-10])


def _bad_zip(path):
    path.write_bytes(b"PK\x03\x04" + bytes(100))


def _two_arrays(path):
    np.savez(path, a=np.ones(3), b=np.ones(3))


def _no_arrays(path):
    np.savez(path)


@pytest.mark.parametrize(
    ("filename", "write", "fragments"),
    [
        ("obj.npy", _object_npy, ["holds pickled objects", "never loads"]),
        ("obj.npz", _object_npz, ["holds pickled objects", "never loads"]),
        ("pickle.npy", _pickle, ["holds pickled objects"]),
        ("random.npy", _random_bytes, ["not a .npy/.npz file"]),
        ("empty.npy", _empty, ["not a valid .npy/.npz file"]),
        ("truncated.npy", _truncated, ["holds 134 B of data", "a truncated or damaged file"]),
        ("bad.npz", _bad_zip, ["not a valid .npy/.npz file"]),
        ("two.npz", _two_arrays, ["must hold one array (or one named 'weights')", "found 2: a, b"]),
        ("none.npz", _no_arrays, ["must hold one array", "found 0: none"]),
        ("missing.npy", None, ["file not found"]),
    ],
    ids=[
        "object-npy",
        "object-npz",
        "pickle",
        "random-bytes",
        "empty",
        "truncated",
        "bad-zip",
        "two-arrays",
        "no-arrays",
        "missing",
    ],
)
def test_load_array_errors(tmp_path, filename, write, fragments):
    path = tmp_path / filename
    if write is not None:
        write(path)
    with pytest.raises(ValueError, match="`--weights`") as exc:
        load_array(path, name="weights")
    message = str(exc.value)
    assert filename in message
    for fragment in fragments:
        assert fragment in message
    assert "allow_pickle" not in message  # never suggest loading pickles
    assert "\n" not in message


def test_load_array_of_a_folder(tmp_path):
    with pytest.raises(ValueError, match="is a directory, not a file"):
        load_array(tmp_path, name="x")
