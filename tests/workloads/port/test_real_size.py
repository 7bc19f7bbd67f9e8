"""``benchmarks/real_size.py`` without building a model: the parameter counts it computes from the
configs are the published ones, and a model estimated above ``--max-gb`` is skipped with its reason,
never started."""

from __future__ import annotations

import subprocess
import sys

import pytest
from paths import ROOT


def test_the_counts_from_the_configs_are_the_published_ones():
    from benchmarks import real_size

    assert real_size.parameters("gpt2-small", None) == 124_439_808  # Hugging Face's gpt2
    assert real_size.parameters("gpt2-medium", None) == 354_823_168  # gpt2-medium
    # TinyLlama-1.1B is 1,100,048,384 with its untied head (32000 x 2048); LlamaModel has none.
    assert real_size.parameters("llama-1b", None) == 1_100_048_384 - 32000 * 2048
    assert real_size.parameters("gpt2-small", 1) < real_size.parameters("gpt2-small", 2)


def _benchmark(*args: str) -> subprocess.CompletedProcess:
    """``benchmarks/real_size.py`` with ``args``, as a user runs it."""
    return subprocess.run(
        [sys.executable, "benchmarks/real_size.py", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_model_too_big_for_the_limit_is_skipped_with_its_reason():
    out = _benchmark("--models", "llama-1b", "--max-gb", "1")
    assert out.returncode == 0, out.stderr
    assert "skipped: estimated" in out.stdout and "above --max-gb 1" in out.stdout


def test_rounds_give_each_references_median_and_the_median_of_its_ratios():
    from benchmarks import real_size

    rounds = [
        {"torch": 40.0, "numpy-fd": 70.0},
        {"torch": 60.0, "numpy-fd": 78.0},
        {"torch": 30.0, "numpy-fd": 48.0},
    ]
    got = real_size.rounds_summary(rounds, ["torch", "numpy-fd"])
    assert got["median"] == {"torch": 40.0, "numpy-fd": 70.0}
    assert got["ratios"]["numpy-fd"] == [1.75, 1.3, 1.6]
    assert got["median_ratio"] == {"numpy-fd": 1.6}  # the rounds' ratios, not the ratio of the medians
    with pytest.raises(ValueError, match="every round must time each of"):
        real_size.rounds_summary([{"torch": 1.0}], ["torch", "numpy-fd"])


def test_rounds_below_one_are_refused_in_one_line():
    out = _benchmark("--models", "gpt2-small", "--rounds", "0")
    assert out.returncode == 2 and "--rounds: expected a whole number of at least 1, found 0" in out.stderr


def test_the_reference_output_runs_the_forward_check(monkeypatch):
    from benchmarks import real_size

    seen = []
    monkeypatch.setattr(real_size, "measured", lambda command, *a, **k: seen.append(command) or {"tail": []})
    real_size.run_check("gpt2-small", "output", 1, 8, 10.0, 1e9)
    real_size.run_check("gpt2-small", "torch", 1, 8, 10.0, 1e9)
    forward, full = seen
    assert forward[forward.index("--quantity") + 1] == "output" and "--reference" not in forward
    assert full[full.index("--reference") + 1] == "torch" and "--quantity" not in full


def test_an_unknown_reference_is_refused_in_one_line():
    out = _benchmark("--models", "gpt2-small", "--references", "torch,fwd")
    assert out.returncode == 2
    assert out.stderr.splitlines()[-1].endswith("expected some of torch, numpy-fd, output, found 'fwd'")
