"""What the documentation claims holds.

- Every ``pip install`` line works from a clone today (or says it is for once the distribution is
  published).
- Every verdict marked as a claim in README and the docs still holds. A claim is an HTML comment next
  to the text that quotes it (docs/measurements/suite.md, "Claims that reproduce")::

      <!-- claim: crosscheck run --workload examples.port.convnet:same_padding --reference torch --quiet
           expect: FAILED: `jax`: the forward pass differs first at `conv1` exit: 1 -->

  The command runs from the repository root (``crosscheck ...`` in this process, anything else in a
  subprocess); ``expect`` must occur in its output, whitespace aside (the terminal wraps lines), where
  `` ... `` stands for any text; ``exit`` is its exit status (0 when not given). A claim marked
  ``slow`` (a benchmark, a real model) runs only with ``CROSSCHECK_CLAIMS=all`` (``nox -s
  docs-claims``). Figures that move with the machine's load (seconds) are never claims: they are
  quoted with machine, load and date.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import io
import os
import re
import shlex
import subprocess
import sys
from typing import NamedTuple

import pytest
from paths import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
#: Tools from the package index that the docs install by name (not crosscheck).
TOOLS = {"nox", "pytest"}
#: Options of ``pip install`` that take a value.
VALUED = {"-c", "--constraint", "--extra-index-url", "--index-url", "-r"}
PIP = re.compile(r"pip install ([^`\n]*)")


def _targets(arguments: str) -> list[str]:
    """What a ``pip install`` installs (its arguments less options), up to a ``&&``, ``;`` or comment."""
    words = shlex.split(re.split(r"&&|;|\s#|\)", arguments)[0].strip().rstrip("."), comments=True)
    targets, skip = [], False
    for word in words:
        if skip or word.startswith("-"):
            skip = word in VALUED and not skip
            continue
        targets.append(word)
    return targets


def install_lines() -> list[tuple[str, str, list[str]]]:
    """``(page:line, line, targets)`` of every ``pip install`` in README and the docs."""
    found = []
    for page in PAGES:
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            for match in PIP.finditer(line):
                found.append((f"{page.relative_to(ROOT)}:{number}", line, _targets(match.group(1))))
    return found


def _works_from_a_clone(target: str) -> bool:
    return target.startswith(".") or target in TOOLS


def test_every_pip_install_line_installs_from_the_clone_or_says_once_published():
    lines = install_lines()
    assert len(lines) > 10  # README, install, the guides
    wrong = [
        f"{where}: {line.strip()}"
        for where, line, targets in lines
        if not all(_works_from_a_clone(t) for t in targets)
        and "once published" not in line
        and "installs that" not in line  # the unrelated `crosscheck` on the index, said as such
    ]
    assert wrong == []


@pytest.mark.parametrize(
    ("line", "targets"),
    [
        ('(`pip install ".[all,port]" -c constraints.txt`):', [".[all,port]"]),
        ("with `pip install 'crosscheck-gradients[all,port]'` (Flax", ["crosscheck-gradients[all,port]"]),
        ("$ pip install nox && nox -s tests        # the test suite", ["nox"]),
        ('$ pip install ".[all]" -c constraints.txt --extra-index-url https://x/whl/cpu', [".[all]"]),
        (
            "$ pip install ./examples/crosscheck-plugin-demo ./tests/plugins/b",
            ["./examples/crosscheck-plugin-demo", "./tests/plugins/b"],
        ),
    ],
    ids=["clone", "index", "a-tool", "options", "folders"],
)
def test_the_parser_reads_targets_and_skips_options(line, targets):
    match = PIP.search(line)
    assert match is not None and _targets(match.group(1)) == targets


# -- claims -----------------------------------------------------------------------------------------------

FENCED = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
CLAIM = re.compile(r"(?<!`)<!--\s*claim:\s*(?P<body>.*?)-->", re.DOTALL)
FIELDS = re.compile(
    r"^(?P<command>.+?)\s+expect:\s+(?P<expect>.+?)(?:\s+exit:\s+(?P<exit>\d+))?(?P<slow>\s+slow)?$"
)
#: What a claim's command needs installed (checked before it runs; a missing one skips it).
NEEDS = {
    "examples.port.convnet:": ("flax",),
    "examples.port.convert_script": ("flax",),
    "examples.port.gpt2": ("flax", "transformers"),
    "examples.port.block_equinox": ("equinox",),
    "examples.port.custom_op_equinox": ("equinox",),
    "benchmarks/refusal.py": ("equinox",),  # block_equinox's port, mistakes planted
    "examples.port.transformer_linen": ("flax",),
    "examples.port.scanned_linen": ("flax",),
}


class Claim(NamedTuple):
    where: str
    command: str
    expect: str
    exit: int
    slow: bool


def claims() -> list[Claim]:
    """Every claim marked in README and the docs, in page order."""
    found = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        # A claim shown in a code block or in backticks is an example of one (line numbers kept).
        text = FENCED.sub(lambda m: "\n" * m.group(0).count("\n"), text)
        for match in CLAIM.finditer(text):
            where = f"{page.relative_to(ROOT)}:{text.count(chr(10), 0, match.start()) + 1}"
            fields = FIELDS.match(" ".join(match.group("body").split()))
            if fields is None:
                raise ValueError(f"{where}: a claim must read `claim: COMMAND expect: TEXT [exit: N] [slow]`")
            exit_status = int(fields.group("exit") or 0)
            found.append(Claim(where, fields["command"], fields["expect"], exit_status, bool(fields["slow"])))
    return found


@functools.cache
def output_of(command: str) -> tuple[int, str]:
    """``(exit status, stdout and stderr)`` of a command run from the repository root (once a session)."""
    words = shlex.split(command)
    if words[0] != "crosscheck":
        done = subprocess.run(words, cwd=ROOT, capture_output=True, text=True, check=False, timeout=3600)
        return done.returncode, done.stdout + done.stderr
    from crosscheck._cli.main import main

    out, before = io.StringIO(), os.getcwd()
    os.chdir(ROOT)  # the examples are imported as `examples.port...` from the root
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            status = main(words[1:])
    finally:
        os.chdir(before)
    return status, out.getvalue()


def holds(expect: str, output: str) -> bool:
    """Whether ``expect`` occurs in ``output``, whitespace aside, `` ... `` standing for any text."""
    parts = [re.escape(" ".join(p.split())) for p in expect.split(" ... ")]
    return re.search(".*?".join(parts), " ".join(output.split())) is not None


def _marks(claim: Claim) -> list[pytest.MarkDecorator]:
    missing = [
        m for k, v in NEEDS.items() if k in claim.command for m in v if importlib.util.find_spec(m) is None
    ]
    return [pytest.mark.skip(reason=f"needs {', '.join(missing)}")] if missing else []


CLAIMS = claims()
#: The claims this run re-runs: the cheap ones in the suite (CI), every one with ``CROSSCHECK_CLAIMS=all``
#: (``nox -s docs-claims``). The slow ones are not collected here rather than skipped: a skip would read
#: as a check that did not happen.
RERUN = [c for c in CLAIMS if not c.slow or os.environ.get("CROSSCHECK_CLAIMS") == "all"]


def test_the_docs_mark_claims_in_readme_and_the_measurements():
    pages = {c.where.split(":")[0] for c in CLAIMS}
    assert "README.md" in pages and "docs/measurements/ports.md" in pages
    assert any(not c.slow for c in CLAIMS)  # the test suite re-runs some in CI


@pytest.mark.parametrize("claim", [pytest.param(c, marks=_marks(c), id=f"{c.where}") for c in RERUN])
def test_each_claim_still_holds(claim):
    status, output = output_of(claim.command)
    assert holds(claim.expect, output), (
        f"{claim.where}: `{claim.command}` no longer says\n{claim.expect}\n{output}"
    )
    assert status == claim.exit, (
        f"{claim.where}: `{claim.command}` exited {status}, the docs say {claim.exit}"
    )


@pytest.mark.parametrize(
    ("expect", "output", "found"),
    [
        ("FAILED: at `conv1`", "FAILED:\n  at `conv1` (Conv2d)", True),
        (
            "| gpt2 | healthy | passes ... | passes |",
            "| gpt2 | healthy | passes (0.82 of it) | passes |",
            True,
        ),
        ("| gpt2 | healthy | flags ... | passes |", "| gpt2 | healthy | passes (0.82) | passes |", False),
        ("PASSED", "FAILED", False),
    ],
    ids=["wrapped", "any-text", "no-match", "a-different-verdict"],
)
def test_a_claim_holds_on_its_text_whitespace_aside(expect, output, found):
    assert holds(expect, output) is found


def test_a_malformed_claim_is_an_error_and_one_in_a_code_block_an_example(tmp_path, monkeypatch):
    page = tmp_path / "page.md"
    page.write_text(
        "```\n<!-- claim: crosscheck run expect: PASSED -->\n```\n`<!-- claim: an example -->`\n"
        "text <!-- claim: crosscheck run PASSED -->\n"
    )
    monkeypatch.setattr(sys.modules[__name__], "PAGES", [page])
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    with pytest.raises(ValueError, match=r"page\.md:5: a claim must read"):
        claims()
