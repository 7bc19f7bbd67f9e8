"""``benchmarks/real_size.py`` without building a model: the parameter counts it computes from the
configs are the published ones, and a model estimated above ``--max-gb`` is skipped with its reason,
never started."""

from __future__ import annotations

import subprocess
import sys

from paths import ROOT


def test_the_counts_from_the_configs_are_the_published_ones():
    from benchmarks import real_size

    assert real_size.parameters("gpt2-small", None) == 124_439_808  # Hugging Face's gpt2
    assert real_size.parameters("gpt2-medium", None) == 354_823_168  # gpt2-medium
    # TinyLlama-1.1B is 1,100,048,384 with its untied head (32000 x 2048); LlamaModel has none.
    assert real_size.parameters("llama-1b", None) == 1_100_048_384 - 32000 * 2048
    assert real_size.parameters("gpt2-small", 1) < real_size.parameters("gpt2-small", 2)


def test_a_model_too_big_for_the_limit_is_skipped_with_its_reason():
    out = subprocess.run(
        [sys.executable, "benchmarks/real_size.py", "--models", "llama-1b", "--max-gb", "1"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "skipped: estimated" in out.stdout and "above --max-gb 1" in out.stdout
