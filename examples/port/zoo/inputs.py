"""The zoo's inputs: token ids, images, audio; each the PyTorch side's, with the Flax side's variant."""

from __future__ import annotations

from typing import Any

import numpy as np

BATCH, SEQUENCE, IMAGE, AUDIO = 2, 6, 8, 64
#: The smallest token id drawn: ids 0 and 1 are the padding ids of these models (BERT's 0, RoBERTa's and
#: BART's 1). PyTorch's ``nn.Embedding(padding_idx=...)`` gives the padding row no gradient, Flax's
#: ``nn.Embed`` does: a padding token used as a real token (attended) makes the two gradients of that
#: row differ, a true difference of the two libraries, not of the port.
LOW = 2


def positions(start: int = 0) -> np.ndarray:
    return np.tile(np.arange(start, start + SEQUENCE, dtype=np.int32), (BATCH, 1))


def token_ids(rng, vocab: int, low: int = LOW) -> np.ndarray:
    return rng.integers(low, vocab, size=(BATCH, SEQUENCE)).astype(np.int32)


def text(vocab: int, *, token_types: bool = False, position_start: int | None = 0, low: int = LOW):
    """Two sequences of 6 ids, every position attended; explicit positions (from ``position_start``)
    and token types where the model takes them, as a user passes them to both sides."""

    def make(rng, dtype) -> dict[str, Any]:
        ids = token_ids(rng, vocab, low)
        arrays = {"input_ids": ids, "attention_mask": np.ones_like(ids)}
        if token_types:
            arrays["token_type_ids"] = np.zeros_like(ids)
        if position_start is not None:
            arrays["position_ids"] = positions(position_start)
        return arrays

    return make


def seq2seq(vocab: int, *, low: int = LOW):
    """An encoder sequence and a decoder sequence of 6 ids each, every position attended."""

    def make(rng, dtype) -> dict[str, Any]:
        ids, decoder_ids = token_ids(rng, vocab, low), token_ids(rng, vocab, low)
        return {
            "input_ids": ids,
            "attention_mask": np.ones_like(ids),
            "decoder_input_ids": decoder_ids,
            "decoder_attention_mask": np.ones_like(decoder_ids),
        }

    return make


def with_positions(inputs: dict[str, Any], start: int = 0, decoder_start: int = 0) -> dict[str, Any]:
    """BART's Flax module takes the positions PyTorch computes itself."""
    return {**inputs, "position_ids": positions(start), "decoder_position_ids": positions(decoder_start)}


def images(rng, dtype) -> dict[str, Any]:
    """Two 3-channel 8x8 images, NCHW as PyTorch takes them."""
    return {"pixel_values": rng.standard_normal((BATCH, 3, IMAGE, IMAGE)).astype(dtype)}


def channels_last(inputs: dict[str, Any]) -> dict[str, Any]:
    """Flax's vision modules take NHWC (their ``PreTrainedModel`` transposes; the module does not)."""
    return {**inputs, "pixel_values": inputs["pixel_values"].transpose(0, 2, 3, 1)}


def text_and_images(vocab: int):
    def make(rng, dtype) -> dict[str, Any]:
        return {**text(vocab)(rng, dtype), **images(rng, dtype)}

    return make


def audio(rng, dtype) -> dict[str, Any]:
    """Two raw waveforms of 64 samples, unit variance."""
    return {"input_values": rng.standard_normal((BATCH, AUDIO)).astype(dtype)}
