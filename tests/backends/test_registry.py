"""The backend registry: built-in names, import strings, entry points, objects, missing frameworks."""

from __future__ import annotations

import importlib
import sys
from importlib import metadata

import numpy as np
import pytest

import crosscheck
from crosscheck import _backends as _backend

BUILTIN_NAMES = ["jax", "torch", "numpy-fd"]

USER_MODULE = """
import numpy as np


def my_grad(weights, x):
    ys = [x]
    for w in weights:
        ys.append(np.maximum(ys[-1] @ w, 0))
    g = 2 * ys[-1]
    out = np.empty_like(weights)
    for k in reversed(range(len(weights))):
        g = g * (ys[k + 1] > 0)
        out[k] = ys[k].T @ g
        g = g @ weights[k].T
    return out


class GradObject:
    def grad(self, weights, x):
        return my_grad(weights, x)


class NamedBackend:
    name = "named-backend"

    def grad(self, weights, x):
        return my_grad(weights, x)


def make_backend():
    return NamedBackend()


def factory_raises():
    raise RuntimeError("cannot start")


obj = GradObject()
not_a_backend = 3.0
"""


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    """``mymodule`` importable from ``tmp_path`` (the working directory) for this test only."""
    (tmp_path / "mymodule.py").write_text(USER_MODULE)
    (tmp_path / "broken_on_import.py").write_text("raise RuntimeError('broken at import')\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    for name in ("mymodule", "broken_on_import"):
        monkeypatch.setitem(sys.modules, name, None)
        del sys.modules[name]  # monkeypatch removes the module again when the test ends
    importlib.invalidate_caches()
    return tmp_path


@pytest.fixture
def inputs():
    return crosscheck.make_inputs(crosscheck.Case(layers=3, dim=4, batch=3, seed=1, dtype="float64"))


@pytest.mark.parametrize("name", BUILTIN_NAMES, ids=BUILTIN_NAMES)
def test_builtin_backends_load(name, inputs):
    if name != "numpy-fd":
        pytest.importorskip(name)
    backend = crosscheck.load_backend(name)
    assert backend.name == name
    assert isinstance(backend, crosscheck.Backend)
    grad = np.asarray(backend.grad(*inputs))
    assert grad.shape == inputs[0].shape
    assert np.all(np.isfinite(grad))
    assert np.any(grad != 0)


def test_oracle_matches_a_hand_written_gradient(user_module, inputs):
    oracle = crosscheck.load_backend("numpy-fd").grad(*inputs)
    by_hand = crosscheck.load_backend("mymodule:my_grad").grad(*inputs)
    assert isinstance(oracle, np.ndarray)
    np.testing.assert_allclose(oracle, by_hand, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize(
    ("spec", "name", "kind"),
    [
        ("mymodule:my_grad", "my_grad", _backend.FunctionBackend),
        ("mymodule:obj", "mymodule:obj", None),
        ("mymodule:GradObject", "mymodule:GradObject", None),
        ("mymodule:NamedBackend", "named-backend", None),
        ("mymodule:make_backend", "named-backend", None),
    ],
    ids=["function", "object", "class", "named-class", "factory"],
)
def test_import_strings(user_module, inputs, spec, name, kind):
    backend = crosscheck.load_backend(spec)
    assert backend.name == name
    if kind is not None:
        assert isinstance(backend, kind)
    assert not isinstance(backend, type)  # classes are instantiated
    mymodule = sys.modules["mymodule"]
    np.testing.assert_array_equal(backend.grad(*inputs), mymodule.my_grad(*inputs))


def _plain_function(weights, x):
    return np.zeros_like(weights)


class _Object:
    name = "my-object"

    def grad(self, weights, x):
        return np.zeros_like(weights)


@pytest.mark.parametrize(
    ("spec", "name"),
    [(_plain_function, "_plain_function"), (_Object(), "my-object"), (_Object, "my-object")],
    ids=["function", "object", "class"],
)
def test_objects_are_backends(spec, name, inputs):
    backend = crosscheck.load_backend(spec)
    assert backend.name == name
    assert np.all(backend.grad(*inputs) == 0)


@pytest.mark.parametrize(
    ("spec", "fragments"),
    [
        ("nope", ["unknown backend `nope`", "jax", "torch", "numpy-fd", "package.module:attribute"]),
        ("numpy_fd", ["unknown backend `numpy_fd`", "Did you mean `numpy-fd`?"]),
        ("JAX", ["unknown backend `JAX`", "jax, torch, numpy-fd"]),
        ("nosuchmodule:f", ["`nosuchmodule:f`", "cannot import module `nosuchmodule`"]),
        ("mymodule:nosuchattr", ["no attribute `nosuchattr`", "my_grad"]),
        ("mymodule:my_gard", ["no attribute `my_gard`", "did you mean `my_grad`?"]),
        ("./mymodule.py:my_grad", ["names a path", "use its module name, `mymodule:my_grad`"]),
        ("mymodule:", ["`mymodule:`", "must look like `package.module:attribute`"]),
        (":my_grad", ["`:my_grad`", "must look like `package.module:attribute`"]),
        ("mymodule:not_a_backend", ["`mymodule:not_a_backend`", "grad(weights, x)", "found float"]),
        ("mymodule:factory_raises", ["calling the factory failed", "RuntimeError: cannot start"]),
        ("broken_on_import:f", ["importing `broken_on_import` failed", "RuntimeError: broken at import"]),
    ],
    ids=[
        "unknown",
        "underscore",
        "wrong-case",
        "no-module",
        "no-attribute",
        "misspelled-attribute",
        "a-file-path",
        "no-attribute-given",
        "no-module-given",
        "not-a-backend",
        "factory-raises",
        "module-raises",
    ],
)
def test_bad_specs_raise_value_error(user_module, spec, fragments):
    with pytest.raises(ValueError, match="backend") as exc:
        crosscheck.load_backend(spec)
    message = str(exc.value)
    for fragment in fragments:
        assert fragment in message
    assert "\n" not in message


def test_an_object_that_is_not_a_backend_is_named_with_its_value():
    with pytest.raises(ValueError, match=r"found int 42\.$") as exc:
        crosscheck.load_backend(42)
    assert "expected an object with a `grad(weights, x)` method" in str(exc.value)


def _hide_torch(monkeypatch):
    """Make ``import torch`` fail as if PyTorch were not installed (undone by ``monkeypatch``)."""
    monkeypatch.delitem(sys.modules, "crosscheck.backends.torch.stack", raising=False)
    monkeypatch.setitem(sys.modules, "torch", None)


@pytest.fixture
def no_torch(monkeypatch):
    _hide_torch(monkeypatch)


def test_missing_framework_names_the_extra(no_torch):
    with pytest.raises(crosscheck.BackendUnavailable, match="torch") as exc:
        crosscheck.load_backend("torch")
    message = str(exc.value)
    assert "\n" not in message
    assert "backend `torch` is unavailable" in message
    assert (
        "from a clone: pip install '.[torch]'; once published: pip install 'crosscheck-gradients[torch]'"
        in message
    )
    assert isinstance(exc.value.__cause__, ImportError)  # raised `from exc`
    assert isinstance(exc.value, ImportError)


def test_unavailability_is_not_cached(monkeypatch):
    pytest.importorskip("torch")
    with monkeypatch.context() as patch:
        _hide_torch(patch)
        with pytest.raises(crosscheck.BackendUnavailable):
            crosscheck.load_backend("torch")
    assert crosscheck.load_backend("torch").name == "torch"


def test_explicitly_requested_unavailable_backend_fails_the_run(no_torch):
    pytest.importorskip("jax")
    report = crosscheck.run(layers=2, dim=3, batch=2, seed=1, backends=["torch", "jax"])
    assert report.backends["torch"].status == "unavailable"
    assert "crosscheck-gradients[torch]" in report.backends["torch"].error
    assert report.backends["jax"].status == "ok"
    assert [c.backend for c in report.comparisons] == ["jax"]
    assert report.comparisons[0].passed
    assert report.passed is False
    assert any("`torch` was asked for but is unavailable" in p for p in report.problems)
    assert report.to_dict()["backends"]["torch"]["status"] == "unavailable"


def test_default_unavailable_backend_does_not_fail_the_run(no_torch):
    report = crosscheck.run(layers=2, dim=3, batch=2, seed=1)
    assert report.backends["torch"].status == "unavailable"
    assert report.passed is True, report.problems


def _fake_entry_points(*entries: metadata.EntryPoint):
    def entry_points(**selection):
        assert selection == {"group": "crosscheck.backends"}
        return [ep for ep in entries if ep.group == selection["group"]]

    return entry_points


@pytest.mark.parametrize(
    ("value", "name"),
    [("mymodule:my_grad", "my_grad"), ("mymodule:NamedBackend", "named-backend"), ("mymodule:obj", "fancy")],
    ids=["function", "class", "object"],
)
def test_entry_point_loads_by_name(user_module, monkeypatch, inputs, value, name):
    entry = metadata.EntryPoint(name="fancy", value=value, group="crosscheck.backends")
    monkeypatch.setattr(metadata, "entry_points", _fake_entry_points(entry))
    backend = crosscheck.load_backend("fancy")
    assert backend.name == name
    np.testing.assert_array_equal(backend.grad(*inputs), sys.modules["mymodule"].my_grad(*inputs))


def test_entry_point_of_another_group_is_ignored(user_module, monkeypatch):
    entry = metadata.EntryPoint(name="fancy", value="mymodule:my_grad", group="other.group")
    monkeypatch.setattr(metadata, "entry_points", _fake_entry_points(entry))
    with pytest.raises(ValueError, match="unknown backend `fancy`"):
        crosscheck.load_backend("fancy")


def test_unknown_name_lists_entry_points(user_module, monkeypatch):
    entry = metadata.EntryPoint(name="fancy", value="mymodule:my_grad", group="crosscheck.backends")
    monkeypatch.setattr(metadata, "entry_points", _fake_entry_points(entry))
    with pytest.raises(ValueError, match="unknown backend `nope`") as exc:
        crosscheck.load_backend("nope")
    assert "expected one of jax, torch, numpy-fd, jax-plain," in str(exc.value)
    assert "torch-segments, fancy" in str(exc.value)


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ("nosuchmodule_for_crosscheck:f", "ModuleNotFoundError"),
        ("mymodule:nosuchattr", "AttributeError"),
        ("broken_on_import:f", "RuntimeError: broken at import"),
    ],
    ids=["no-module", "no-attribute", "module-raises"],
)
def test_broken_entry_point_names_it(user_module, monkeypatch, value, fragment):
    entry = metadata.EntryPoint(name="broken", value=value, group="crosscheck.backends")
    monkeypatch.setattr(metadata, "entry_points", _fake_entry_points(entry))
    with pytest.raises(ValueError, match="backend `broken`") as exc:
        crosscheck.load_backend("broken")
    assert value in str(exc.value)
    assert fragment in str(exc.value)


def test_builtin_names_win_over_entry_points(monkeypatch):
    entry = metadata.EntryPoint(name="numpy-fd", value="nosuchmodule:f", group="crosscheck.backends")
    monkeypatch.setattr(metadata, "entry_points", _fake_entry_points(entry))
    assert crosscheck.load_backend("numpy-fd").name == "numpy-fd"


class _BrokenInfo:
    name = "broken-info"

    def grad(self, weights, x):
        return np.zeros_like(weights)

    def info(self):
        raise RuntimeError("no info today")


@pytest.mark.parametrize(
    ("backend", "expected"),
    [
        (_BrokenInfo(), {"info_error": "RuntimeError: no info today"}),
        (_Object(), {}),
        (
            _backend.FunctionBackend(_plain_function),
            {"framework": "user function", "version": "", "device": "", "source": __name__},
        ),
    ],
    ids=["raises", "absent", "function"],
)
def test_backend_info_never_raises(backend, expected):
    assert _backend.backend_info(backend) == expected
