"""The zoo's text models: encoder-only, decoder-only (learned and rotary positions), encoder-decoder."""

from __future__ import annotations

from .. import gpt2
from . import inputs as io
from .spec import QUIET, STD, Arch

VOCAB = 16
#: Two layers, width 8, two heads of 4, a feed-forward of 16, 16 positions, no dropout.
ENCODER = dict(
    vocab_size=VOCAB,
    hidden_size=8,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=16,
    max_position_embeddings=16,
    initializer_range=STD,
    **QUIET,
)
DECODER = dict(
    vocab_size=VOCAB,
    hidden_size=8,
    num_hidden_layers=2,
    num_attention_heads=2,
    num_key_value_heads=2,
    intermediate_size=16,
    max_position_embeddings=16,
    initializer_range=STD,
    use_cache=False,
)

#: BART's shape, and Marian's and Pegasus's: two encoder and two decoder layers of width 8.
SEQ2SEQ = dict(
    vocab_size=VOCAB,
    d_model=8,
    encoder_layers=2,
    decoder_layers=2,
    encoder_attention_heads=2,
    decoder_attention_heads=2,
    encoder_ffn_dim=16,
    decoder_ffn_dim=16,
    max_position_embeddings=16,
    dropout=0.0,
    attention_dropout=0.0,
    activation_dropout=0.0,
    init_std=STD,
    use_cache=False,
)


def t5_buckets_for_todays_jax() -> None:
    """transformers 4.57's Flax T5 buckets relative positions with ``jnp.clip(x, a_max=...)``, a keyword
    JAX 0.10 no longer takes (``TypeError`` at ``init``); a user fixes the one static method with the
    same formula (``jnp.minimum``), as here, before building the module."""
    import jax.numpy as jnp
    from transformers.models.t5.modeling_flax_t5 import FlaxT5Attention

    def bucket(relative_position, bidirectional=True, num_buckets=32, max_distance=128):
        buckets = 0
        if bidirectional:
            num_buckets //= 2
            buckets += (relative_position > 0) * num_buckets
            relative_position = jnp.abs(relative_position)
        else:
            relative_position = -jnp.minimum(relative_position, 0)
        exact = num_buckets // 2
        large = exact + (
            jnp.log(relative_position / exact) / jnp.log(max_distance / exact) * (num_buckets - exact)
        )
        large = jnp.minimum(large, num_buckets - 1)
        return (buckets + jnp.where(relative_position < exact, relative_position, large)).astype("i4")

    FlaxT5Attention._relative_position_bucket = staticmethod(bucket)


ARCHS = [
    Arch(
        "gpt2",
        "decoder-only",
        "GPT2",
        "gpt2",
        gpt2.CONFIG,
        gpt2.tokens,
        overrides=gpt2.OVERRIDES,
        overrides_note="GPT-2's Conv1D is (in, out): the square kernels fit both ways (examples/port/gpt2)",
    ),
    Arch("bert", "encoder-only", "Bert", "bert", ENCODER, io.text(VOCAB, token_types=True)),
    Arch(
        "roberta",
        "encoder-only",
        "Roberta",
        "roberta",
        {**ENCODER, "max_position_embeddings": 16, "pad_token_id": 1},
        # RoBERTa's positions start after its padding index (1): 2, 3, ...
        io.text(VOCAB, token_types=True, position_start=2),
    ),
    Arch(
        "albert",
        "encoder-only",
        "Albert",
        "albert",
        {**ENCODER, "embedding_size": 8, "classifier_dropout_prob": 0.0},
        io.text(VOCAB, token_types=True),
    ),
    Arch(
        "electra",
        "encoder-only",
        "Electra",
        "electra",
        {**ENCODER, "embedding_size": 8},
        io.text(VOCAB, token_types=True),
    ),
    Arch(
        "distilbert",
        "encoder-only",
        "DistilBert",
        "distilbert",
        dict(
            vocab_size=VOCAB,
            dim=8,
            n_layers=2,
            n_heads=2,
            hidden_dim=16,
            max_position_embeddings=16,
            dropout=0.0,
            attention_dropout=0.0,
            initializer_range=STD,
        ),
        # DistilBERT takes no positions: each side computes its own.
        io.text(VOCAB, position_start=None),
    ),
    Arch(
        "gpt_neo",
        "decoder-only",
        "GPTNeo",
        "gpt_neo",
        dict(
            vocab_size=VOCAB,
            hidden_size=8,
            num_layers=2,
            num_heads=2,
            attention_types=[[["global", "local"], 1]],
            window_size=4,
            intermediate_size=16,
            max_position_embeddings=16,
            embed_dropout=0.0,
            attention_dropout=0.0,
            resid_dropout=0.0,
            initializer_range=STD,
            use_cache=False,
        ),
        io.text(VOCAB),
    ),
    Arch(
        "opt",
        "decoder-only",
        "OPT",
        "opt",
        dict(
            vocab_size=VOCAB,
            hidden_size=8,
            num_hidden_layers=2,
            ffn_dim=16,
            num_attention_heads=2,
            max_position_embeddings=16,
            word_embed_proj_dim=8,
            dropout=0.0,
            attention_dropout=0.0,
            init_std=STD,
            use_cache=False,
        ),
        io.text(VOCAB),
    ),
    Arch("llama", "decoder-only, rotary + RMSNorm", "Llama", "llama", DECODER, io.text(VOCAB)),
    Arch(
        "mistral",
        "decoder-only, rotary + RMSNorm",
        "Mistral",
        "mistral",
        # Mistral's default window (4096, longer than any input here): with ``sliding_window=None``
        # transformers 4.57's Flax Mistral masks all but the diagonal (``BUGS``: mistral_no_window).
        {**DECODER, "sliding_window": 4096},
        io.text(VOCAB),
    ),
    Arch(
        "gemma",
        "decoder-only, rotary + RMSNorm",
        "Gemma",
        "gemma",
        {**DECODER, "head_dim": 4},
        io.text(VOCAB),
    ),
    Arch(
        "bart",
        "encoder-decoder",
        "Bart",
        "bart",
        SEQ2SEQ,
        io.seq2seq(VOCAB),
        jax_inputs=io.with_positions,
    ),
    Arch(
        "t5",
        "encoder-decoder",
        "T5",
        "t5",
        dict(
            vocab_size=VOCAB,
            d_model=8,
            d_kv=4,
            d_ff=16,
            num_layers=2,
            num_decoder_layers=2,
            num_heads=2,
            relative_attention_num_buckets=8,
            relative_attention_max_distance=16,
            dropout_rate=0.0,
            use_cache=False,
        ),
        io.seq2seq(VOCAB),
        before=t5_buckets_for_todays_jax,
    ),
    # Sinusoidal position tables, which PyTorch keeps in float32 (a frozen parameter, a buffer) and Flax
    # builds in float64: in a float64 check, a part the original computes in float32 by design.
    Arch(
        "marian",
        "encoder-decoder, sinusoidal positions",
        "Marian",
        "marian",
        # the padding id and the decoder's start inside the tiny vocabulary (Marian's are its last id)
        {**SEQ2SEQ, "pad_token_id": 1, "decoder_start_token_id": 1, "eos_token_id": 0},
        io.seq2seq(VOCAB),
        jax_inputs=io.with_positions,
    ),
    Arch(
        "pegasus",
        "encoder-decoder, sinusoidal positions",
        "Pegasus",
        "pegasus",
        SEQ2SEQ,
        io.seq2seq(VOCAB),
        jax_inputs=io.with_positions,
    ),
    Arch(
        "roformer",
        "encoder-only, sinusoidal rotary positions",
        "RoFormer",
        "roformer",
        ENCODER,
        # RoFormer takes no positions: each side rotates by the token's index
        io.text(VOCAB, token_types=True, position_start=None),
        keywords={"head_mask": None},
    ),
    Arch(
        "xglm",
        "decoder-only, sinusoidal positions",
        "XGLM",
        "xglm",
        dict(
            vocab_size=VOCAB,
            d_model=8,
            num_layers=2,
            attention_heads=2,
            ffn_dim=16,
            max_position_embeddings=16,
            dropout=0.0,
            attention_dropout=0.0,
            activation_dropout=0.0,
            layerdrop=0.0,
            init_std=STD,
            use_cache=False,
        ),
        io.text(VOCAB),
    ),
]
