"""Outputs in another layout, proven by the values (``port/declare/layout.py``) and the default loss drawn
in PyTorch's layout (``losses.outputs_loss``)."""

from __future__ import annotations

import numpy as np
import pytest

from crosscheck._workloads.losses import outputs_loss, projection
from crosscheck._workloads.port.declare import layout
from crosscheck._workloads.port.declare.layout import apart, candidates, declared, per_array, prove

RNG = np.random.default_rng(3)


def test_an_nhwc_image_is_proven_nchw_by_its_values_not_by_its_shape():
    nchw = RNG.standard_normal((2, 3, 16, 16))
    found = candidates((2, 16, 16, 3), nchw.shape)
    assert len(found) == 2  # (0, 3, 1, 2) and its height and width swapped: the shapes cannot tell
    for perm in ((0, 2, 3, 1), (0, 3, 2, 1)):
        jax = nchw.transpose(*perm)  # a port writing the image NHWC, and one writing it transposed
        layout, why = prove(nchw, jax)
        assert why == "" and layout is not None
        np.testing.assert_array_equal(layout.to_torch(jax), nchw)


def test_a_reshape_and_a_permutation_together():
    # A VAE's attention: PyTorch's GroupNorm sees (B, C, H*W), Flax's (B, H, W, C).
    torch = RNG.standard_normal((2, 8, 4, 4))
    jax = torch.transpose(0, 2, 3, 1)
    layout, _ = prove(torch.reshape(2, 8, 16), jax)
    assert layout is not None and layout.perm == (0, 3, 1, 2) and layout.shape == (2, 8, 16)
    np.testing.assert_array_equal(layout.to_torch(jax), torch.reshape(2, 8, 16))


def test_tokens_as_many_as_channels_is_read_as_it_is_when_it_is():
    # (B, H*W, C) with 16 tokens and 16 channels: moving the last axis to axis 1 keeps the shape.
    q = RNG.standard_normal((2, 16, 16))
    layout, _ = prove(q, q + 1e-7 * RNG.standard_normal(q.shape))
    assert layout is not None and layout.identity
    layout, _ = prove(q, q.transpose(0, 2, 1))
    assert layout is not None and layout.perm == (0, 2, 1)


def test_a_symmetric_output_needs_no_telling():
    a = RNG.standard_normal((2, 5, 5))
    sym = a + a.transpose(0, 2, 1)
    layout, why = prove(sym, sym)
    assert layout is not None and layout.identity and why == ""


def test_values_that_cannot_tell_are_said_not_guessed():
    torch = RNG.standard_normal((2, 3, 8, 8))
    unrelated = RNG.standard_normal((2, 8, 8, 3))  # as far from every reading
    layout, why = prove(torch, unrelated)
    assert layout is None and "read axes (0, 3, 1, 2)" in why


def test_values_far_in_every_reading_are_apart_not_ambiguous():
    torch = RNG.standard_normal((2, 3, 8, 8))
    found = candidates((2, 8, 8, 3), torch.shape)
    far = apart(torch, RNG.standard_normal((2, 8, 8, 3)), found)  # unrelated: far read every way
    assert "read axes (0, 3, 1, 2)" in far and "read axes (0, 3, 2, 1)" in far
    near = torch.transpose(0, 2, 3, 1) * 1.05  # one reading within a tenth: no failure certain
    assert apart(torch, near, found) == ""


def test_unrelated_shapes_have_no_candidate():
    assert candidates((2, 5, 4), (1, 5, 4)) == []  # a broadcast, not a layout
    assert candidates((2, 6), (3, 4)) == []  # not a merge of adjacent axes
    assert prove(np.zeros((3, 4)), np.zeros((2, 6))) == (None, "")


def test_a_declared_layout():
    assert declared("NHWC", (2, 8, 8, 3), (2, 3, 8, 8)).perm == (0, 3, 1, 2)
    assert declared((0, 3, 1, 2), (2, 8, 8, 3), (2, 3, 8, 8)).perm == (0, 3, 1, 2)
    assert declared((0, 1, 2, 3), (2, 8, 8, 3), (2, 3, 8, 8)) is None  # not PyTorch's shape
    with pytest.raises(ValueError, match="a permutation of the JAX output's 4 axes"):
        declared((0, 1), (2, 8, 8, 3), (2, 3, 8, 8))
    assert per_array((0, 2, 1), 2) == [(0, 2, 1), (0, 2, 1)]
    assert per_array([None, "NHWC"], 3) == [None, "NHWC", None]


def test_the_default_loss_projects_one_array_drawn_in_pytorch_s_layout():
    nchw = RNG.standard_normal((2, 3, 6, 6))
    nhwc = nchw.transpose(0, 2, 3, 1)
    layout, _ = prove(nchw, nhwc)
    both = outputs_loss((nchw, nchw[0]), seed=4), outputs_loss((nhwc, nchw[0]), seed=4, layouts=(layout,))
    assert both[0] == pytest.approx(both[1], rel=1e-12)
    assert both[0] == pytest.approx(
        float(np.sum(projection(nchw.shape, 4) * nchw)) + outputs_loss(nchw[0], seed=5)
    )
    # Drawn in each side's own shape, the two sides would compute two different losses.
    assert outputs_loss(nhwc, seed=4) != pytest.approx(outputs_loss(nchw, seed=4), rel=1e-3)


# -- ports: the mini UNet (examples/port/unet.py) and a square output -----------------------------------


def _unet(name):
    pytest.importorskip("torch")
    pytest.importorskip("flax")
    from examples.port import unet

    return getattr(unet, name)


def _run(port, **kwargs):
    import crosscheck

    return crosscheck.run(workload=port, reference="torch", backends=["jax"], **kwargs)


def test_the_healthy_unet_with_its_output_left_nhwc_passes():
    # Both sides project one array drawn in PyTorch's NCHW: one loss, so the gradients agree too.
    report = _run(_unet("port"))
    assert report.passed, report.problems


def test_attention_with_as_many_tokens_as_channels_is_compared_as_it_is():
    # At 8x8, attention's (B, H*W, C) is (2, 16, 16): moving the last axis keeps the shape, and
    # comparing it transposed marked `attn.q/k/v/proj` as modules cut differently (a factor of 1).
    report = _run(_unet("square"))
    assert report.passed, report.problems
    attention = [c for c in report.comparisons if (c.module or "").startswith("attn.")]
    assert {c.module for c in attention} >= {"attn.q", "attn.k", "attn.v", "attn.proj"}
    assert all(c.status == "ok" for c in attention), [(c.module, c.status) for c in attention]
    assert not [c.module for c in report.comparisons if "broadcast" in c.coverage]  # every output as it is


def test_a_planted_bug_in_the_nhwc_unet_is_still_located():
    report = _run(_unet("attention_scale"))
    assert not report.passed
    assert "`attn`" in report.verdicts()["jax"]


class _Square:
    """A Linear ``fc`` on ``(B, 3, 5)`` into ``(B, 3, 3)``: as many tokens as features. ``factor``: the
    port's output scaled (a planted bug; ``negated``: -1); ``offset``: every bias of ``fc`` (a large one
    makes the output nearly its own transpose)."""

    @staticmethod
    def port(negated: bool, transposed: bool = False, factor: float = 1.0, offset=None, **kwargs):
        torch = pytest.importorskip("torch")
        nn = pytest.importorskip("flax.linen")
        import crosscheck

        class Torch(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = torch.nn.Linear(5, 3)

            def forward(self, x):
                return self.fc(x)

        class Flax(nn.Module):
            @nn.compact
            def __call__(self, x):
                return nn.Dense(3, name="fc")(x)

        torch.manual_seed(0)
        original = Torch().eval()
        if offset is not None:
            with torch.no_grad():
                original.fc.bias.fill_(offset)
        sign = (-1.0 if negated else 1.0) * factor
        return crosscheck.Port(
            name="square",
            torch=original,
            jax=Flax(),
            inputs=lambda rng, dtype: {"x": rng.standard_normal((2, 3, 5)).astype(dtype)},
            jax_call=lambda model, i: sign * (model(**i).transpose(0, 2, 1) if transposed else model(**i)),
            **kwargs,
        )


def test_an_output_whose_layout_the_values_cannot_tell_is_refused_in_one_line():
    # An output nearly its own transpose, scaled by 4 %: read as it is or transposed, it is about as near
    # PyTorch's, both readings within a tenth of it; the port converts its inputs (`jax_inputs`), so its
    # output may well be in another layout of that shape.
    port = _Square.port(negated=False, factor=1.04, offset=20.0, jax_inputs=lambda i: {"x": i["x"] + 0.0})
    with pytest.raises(ValueError, match="cannot be told from the values") as refused:
        _run(port)  # before any backend runs
    said = str(refused.value)
    assert "\n" not in said
    assert "cannot be told from the values" in said
    assert "`jax_call`" in said and "output_layout=" in said


def test_an_output_as_far_from_the_original_read_every_way_fails_not_refused():
    # The port's output negated: read as it is or transposed, it is as far from PyTorch's, and far: no
    # layout is in question, the port differs in every one; its output row fails the check.
    report = _run(_Square.port(negated=True, jax_inputs=lambda i: {"x": i["x"] + 0.0}))
    assert not report.passed
    assert "in every layout its shapes allow" in report.verdicts()["jax"]
    assert [c.status for c in report.comparisons if "every layout" in (c.parameter or "")] == ["mismatch"]


def test_a_declared_output_layout_is_taken_and_a_difference_located():
    report = _run(_Square.port(negated=True, output_layout=(0, 1, 2)))
    assert not report.passed
    assert "cannot be told" not in " ".join(report.problems)
    healthy = _run(_Square.port(negated=False))
    assert healthy.passed, healthy.problems


def test_a_custom_loss_of_an_output_in_another_layout_is_said_beside_the_gradient():
    # The port returns the output transposed (values prove it); a loss of the user's that weighs
    # positions sees each side's as it is: the gradients differ, and the verdict says why.
    port = _Square.port(negated=False, transposed=True, loss=lambda out: (out[:, 0, 1:] ** 2).sum())
    report = _run(port)
    assert not report.passed
    verdict = report.verdicts()["jax"]
    assert "another layout (array 0: axes (0, 2, 1))" in verdict and "custom `loss=`" in verdict
    assert _run(_Square.port(negated=False, transposed=True)).passed  # the default loss: one loss


def test_a_port_that_converts_no_layout_is_compared_as_it_is_when_values_cannot_tell():
    # No `jax_inputs`, no channels-last kernel: nothing to suspect, and a planted bug is a difference.
    report = _run(_Square.port(negated=True))
    assert not report.passed
    assert "cannot be told" not in " ".join(report.problems)


class _Conv:
    """Two 3x3 convolutions on a square ``(B, 3, 6, 6)`` image, NHWC in Flax (``jax_inputs``, its output
    left NHWC); ``swapped``: ``conv2`` reads its kernel with height and width swapped (a planted bug as
    far from the original's as a transposition of the image)."""

    @staticmethod
    def port(swapped=False, **kwargs):
        torch = pytest.importorskip("torch")
        nn = pytest.importorskip("flax.linen")

        class Torch(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.conv1 = torch.nn.Conv2d(3, 4, 3, padding=1)
                self.conv2 = torch.nn.Conv2d(4, 3, 3, padding=1)

            def forward(self, x):
                return self.conv2(torch.tanh(self.conv1(x)))

        class Swapped(nn.Conv):
            def __call__(self, x):  # H and W swapped around the convolution: its kernel's swapped
                return super().__call__(x.swapaxes(1, 2)).swapaxes(1, 2)

        class Flax(nn.Module):
            @nn.compact
            def __call__(self, x):
                x = nn.tanh(nn.Conv(4, (3, 3), padding=1, name="conv1")(x))
                return (Swapped if swapped else nn.Conv)(3, (3, 3), padding=1, name="conv2")(x)

        torch.manual_seed(0)
        return crosscheck_port(
            name="conv",
            torch=Torch().eval(),
            jax=Flax(),
            inputs=lambda rng, dtype: {"x": rng.standard_normal((2, 3, 6, 6)).astype(dtype)},
            jax_inputs=lambda i: {"x": i["x"].transpose(0, 2, 3, 1)},
            **kwargs,
        )


def crosscheck_port(**kwargs):
    import crosscheck

    return crosscheck.Port(**kwargs)


def test_an_output_apart_in_every_layout_fails_at_its_module_not_refused():
    # The image is square: its NHWC output reads in PyTorch's NCHW two ways, and the planted bug leaves
    # it far from the original's in both. No layout is in question: the port differs whatever its
    # layout, and the check fails where the difference starts, with the output's failing row.
    report = _run(_Conv.port(swapped=True))
    assert not report.passed
    verdict = report.verdicts()["jax"]
    assert "`conv2`" in verdict and "cannot be told" not in verdict, verdict
    assert "in every layout its shapes allow" in verdict and "output_layout=" in verdict
    rows = [c for c in report.comparisons if "every layout" in (c.parameter or "")]
    assert len(rows) == 1 and not rows[0].passed and rows[0].status == "mismatch"
    assert "read axes (0, 3, 1, 2)" in rows[0].message and "read axes (0, 3, 2, 1)" in rows[0].message


def test_the_healthy_square_conv_passes_its_layout_proven():
    report = _run(_Conv.port())
    assert report.passed, report.problems
    assert not [c for c in report.comparisons if "every layout" in (c.parameter or "")]


def test_the_candidates_of_two_shapes_are_made_once():
    """They depend on the shapes alone (each reading told apart by an index array as large as the
    array): every module compared at those shapes reads the same list, a list of its own."""
    first = layout.candidates((2, 3, 5, 7), (2, 7, 5, 3))
    made = layout._candidates.cache_info().misses
    again = layout.candidates([2, 3, 5, 7], np.array([2, 7, 5, 3]))
    assert layout._candidates.cache_info().misses == made
    assert again == first and again is not first
