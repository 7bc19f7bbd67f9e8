"""The documentation: every command it shows parses, the JSON and configuration tables match the code,
the command-line reference covers the parser, and the README stays short.

Nothing here runs a documented command (that is what the guides' real outputs are for); parsing is
enough to catch an option that was renamed or removed. Keep it quick.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shlex
from pathlib import Path

import numpy as np
import planted
import pytest
from paths import ROOT

import crosscheck
from crosscheck._cli.common import UsageError
from crosscheck._cli.main import build_parser
from crosscheck._cli.reference import PAGE, REGENERATE, markdown, page, subcommands
from crosscheck._sweep.config import MATRIX_DEFAULTS, SCHEMA

DOCS = ROOT / "docs"
PAGES = sorted(DOCS.rglob("*.md"))
FENCE = re.compile(r"^```(\w*)\s*$")


def _blocks(path: Path) -> list[tuple[str, list[str]]]:
    """The fenced code blocks of a Markdown file: ``(language, lines)``."""
    blocks, language, lines = [], None, []
    for line in path.read_text().splitlines():
        match = FENCE.match(line.strip())
        if match and language is None:
            language, lines = match.group(1), []
        elif line.strip() == "```" and language is not None:
            blocks.append((language, lines))
            language = None
        elif language is not None:
            lines.append(line)
    return blocks


def _argv(line: str) -> list[str] | None:
    """The crosscheck arguments of a shell line that runs crosscheck, else None."""
    words = shlex.split(line, comments=True)
    while "&&" in words:  # `cd tests && crosscheck ...`: the last command
        words = words[words.index("&&") + 1 :]
    if words[:1] == ["crosscheck"]:
        return words[1:]
    if words[:3] == ["python", "-m", "crosscheck"]:
        return words[3:]
    if words[:3] == ["nox", "-s", "crosscheck"] and "--" in words:  # the session runs `crosscheck sweep`
        return ["sweep", *words[words.index("--") + 1 :]]
    return None


def _commands() -> list[tuple[str, list[str], str | None]]:
    """Every documented command: ``(where, argv, the error line shown right after it, if any)``."""
    found = []
    for path in [ROOT / "README.md", *PAGES]:
        for language, lines in _blocks(path):
            if language not in ("console", "bash", "sh", "shell"):
                continue
            for i, line in enumerate(lines):
                if language == "console":
                    if not line.startswith("$ "):
                        continue
                    line = line[2:]
                argv = _argv(line) if line.strip() else None
                if argv is None:
                    continue
                after = lines[i + 1] if i + 1 < len(lines) else ""
                error = after if after.startswith("crosscheck: error: ") else None
                found.append((f"{path.relative_to(ROOT)}: {line.strip()}", argv, error))
    return found


COMMANDS = _commands()


def test_the_documentation_shows_commands():
    assert len(COMMANDS) > 40
    assert {argv[0] for _, argv, _ in COMMANDS if argv} >= {"run", "explain", "sweep", "replay", "list"}


@pytest.mark.parametrize(("where", "argv", "error"), COMMANDS, ids=[c[0] for c in COMMANDS])
def test_every_documented_command_parses(where, argv, error):
    parser = build_parser()
    if argv[-1:] in (["--help"], ["-h"], ["--version"]):
        with pytest.raises(SystemExit, match=r"^0$"):
            parser.parse_args(argv)
    elif error is None:
        parser.parse_args(argv)  # a UsageError here is a command the parser no longer accepts
    else:
        # A command shown with its error: if the parser rejects it, then with that very message (else
        # the error comes later, from the run, and the command still parses).
        try:
            parser.parse_args(argv)
        except UsageError as exc:
            message = "crosscheck: error: " + " ".join(str(exc).split())
        else:
            message = error
        assert message == error, where


# -- the JSON report: every key documented, every documented key real --------------------------------

JSON_TYPES = {bool: "bool", int: "int", float: "number", str: "string", list: "array", dict: "object"}


def _documented_keys() -> dict[str, set[str]]:
    """``{path: {type, ...}}`` from the tables of docs/reference/json.md."""
    rows = {}
    for line in (DOCS / "reference" / "json.md").read_text().splitlines():
        match = re.match(r"^\| `([^`]+)` \| ([a-z ]+?) \|", line)
        if match:
            rows[match.group(1)] = {t.strip() for t in match.group(2).split(" or ")}
    return rows


def _type(value) -> str:
    return "null" if value is None else JSON_TYPES[type(value)]


def _paths(report: dict) -> dict[str, set[str]]:
    """The report's keys as the page names them (``backends.<name>.x``, ``comparisons[].x``)."""
    found: dict[str, set[str]] = {}

    def add(path, value):
        found.setdefault(path, set()).add(_type(value))

    for key, value in report.items():
        add(key, value)
    for key, value in report["case"].items():
        add(f"case.{key}", value)
    for record in report["backends"].values():
        for key, value in record.items():
            add(f"backends.<name>.{key}", value)
    for comparison in report["comparisons"]:
        for key, value in comparison.items():
            add(f"comparisons[].{key}", value)
    for key, value in report["environment"].items():
        add(f"environment.{'<framework>' if key in ('jax', 'torch') else key}", value)
    for key, value in (report.get("hvp_direction") or {}).items():
        add(f"hvp_direction.{key}", value)
    return found


def _numpy_workload_reports() -> list[dict]:
    def loss(p, i):
        return float(np.sum(np.tanh(i["x"] @ p["w"] + p["b"]) ** 2))

    def grad(p, i):
        h = np.tanh(i["x"] @ p["w"] + p["b"])
        delta = 2 * h * (1 - h**2)
        return {"w": i["x"].T @ delta, "b": delta.sum(axis=0)}

    workload = crosscheck.Workload(
        name="tanh", parameters={"w": (3, 2), "b": (2,)}, inputs={"x": (4, 3)}, reference=loss
    )
    return [crosscheck.run(workload=workload, backends=[grad]).to_dict()]


@pytest.fixture(scope="module")
def reports() -> list[dict]:
    framework = [name for name in ("torch", "jax") if importlib.util.find_spec(name)][:1]
    small = {"layers": 2, "dim": 3, "batch": 2}
    runs = [
        crosscheck.run(**small, backends=[planted.correct, planted.transposed, *framework], explain=True),
        crosscheck.run(weights=np.ones((2, 3, 3), np.float32), x=np.ones((2, 3), np.float32),
                       backends=[planted.correct]),
        crosscheck.run(layers=2, dim=6, batch=2, oracle_mode="screen", backends=[planted.correct]),
        crosscheck.run(**small, quantity="hvp", backends=["numpy-fd"]),
        crosscheck.check("usercode:generate_dies"),  # its worker process dies: "halted"
    ]  # fmt: skip
    return [r.to_dict() for r in runs] + _numpy_workload_reports()


def test_every_key_of_a_real_report_is_documented_with_its_type(reports):
    documented = _documented_keys()
    for report in reports:
        json.dumps(report)  # a real JSON document
        for path, types in _paths(report).items():
            assert path in documented, f"`{path}` is in the report but not in docs/reference/json.md"
            allowed = documented[path] | ({"int"} if "number" in documented[path] else set())
            assert types <= allowed, f"`{path}`: found {types}, documented {documented[path]}"


def test_every_documented_key_occurs_in_a_real_report(reports):
    found = set().union(*(_paths(report) for report in reports))
    missing = set(_documented_keys()) - found
    if not any(importlib.util.find_spec(name) for name in ("torch", "jax")):
        missing.discard("environment.<framework>")  # recorded only when a framework backend ran
    assert not missing, f"documented but in no report: {sorted(missing)}"


# -- configuration keys ----------------------------------------------------------------------------


def test_the_configuration_table_is_the_schema():
    rows = {}
    for line in (DOCS / "reference" / "configuration.md").read_text().splitlines():
        match = re.match(r"^\| `([a-z0-9_]+)` \| [^|]+ \| ([^|]+) \|", line)
        if match:
            rows[match.group(1)] = match.group(2).strip()
    assert list(rows) == list(SCHEMA)
    for key, default in MATRIX_DEFAULTS.items():
        assert rows[key] == f"`{json.dumps(default)}`", key


# -- the command-line reference ----------------------------------------------------------------------


def test_the_cli_reference_names_every_command_and_option():
    text = markdown()
    for name, parser in subcommands().items():
        assert f"## `crosscheck {name}`" in text
        for action in parser._actions:
            for option in action.option_strings:
                if option not in ("-h", "--help"):
                    assert f"`{option}" in text or f", {option}" in text, (name, option)
    page = (DOCS / "reference" / "cli.md").read_text()
    assert "<!-- the command-line reference, generated from the parser -->" in page


def test_the_committed_cli_reference_is_what_the_parser_makes():
    # The page was an empty marker in the repository, filled only when the site was built: the
    # reference is committed, and kept what the parser makes.
    path = ROOT / PAGE
    found = path.read_text()
    assert len(found) > 10_000 and "## `crosscheck run`" in found
    assert found == page(found), (
        f"{PAGE} differs from the parser's options: run `{REGENERATE}` to write it again"
    )


#: An option as ``--help`` prints it: ``--layers``, ``-h``.
OPTION = re.compile(r"(?<![\w-])(--?[a-zA-Z][\w-]*)")


def _reference_sections() -> dict[str, str]:
    """The generated reference by command (``""``: the text before the first command)."""
    parts = re.split(r"^## `crosscheck ", markdown(), flags=re.MULTILINE)
    return {"": parts[0], **{part.split("`", 1)[0]: part for part in parts[1:]}}


@pytest.mark.parametrize("name", ["", *subcommands()], ids=lambda n: n or "crosscheck")
def test_each_command_s_help_and_its_reference_list_the_same_options(name):
    # What a user reads in `crosscheck COMMAND --help` and on docs/reference/cli.md: one set of options.
    parser = subcommands()[name] if name else build_parser()
    shown = set(OPTION.findall(parser.format_help())) - {"-h", "--help"}
    listed = set(OPTION.findall(_reference_sections()[name])) - {"-h", "--help"}
    if not name:  # the page's intro also quotes the examples' options; the parser's own are what count
        listed &= shown | {"--version"}
    assert shown == listed


# -- the site and the README -------------------------------------------------------------------------


def test_every_page_is_in_the_nav_and_every_nav_entry_exists():
    config = (ROOT / "mkdocs.yml").read_text()
    nav = re.findall(r"^\s+- [^:#]+: ([\w/.-]+\.md)\s*$", config, flags=re.MULTILINE)
    nav += re.findall(r"^  - [^:#]+: ([\w/.-]+\.md)\s*$", config, flags=re.MULTILINE)
    pages = {str(p.relative_to(DOCS)) for p in PAGES}
    assert set(nav) == pages


def test_the_readme_and_the_install_page_name_every_extra():
    # README's list said `port` (Flax, Equinox, transformers) but not the `flax`, `equinox` and
    # `transformers` extras a user installs alone.
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    readme = (ROOT / "README.md").read_text()
    said = " ".join(readme[readme.index("Extras:") :].split("[installing]")[0].split())
    table = (DOCS / "install.md").read_text()
    for extra in extras:
        assert f"`{extra}`" in said, f"README's extras list lacks `{extra}`: {said}"
        assert f"| `{extra}` |" in table, f"docs/install.md's table of extras lacks `{extra}`"


def test_the_port_guide_says_what_the_port_does_now():
    # It said an Equinox Conv2d's (C, 1, 1) bias does not map (it maps as `unit axes`), and had no word
    # of --budget, what a port of real size needs without --reference torch.
    guide = " ".join((DOCS / "guides" / "port-model.md").read_text().split())
    for stale in ("does not map yet", "`(C,)`, stays unmatched"):
        assert stale not in guide, stale
    said = [m.start() for m in re.finditer(r"An Equinox `Conv2d` keeps its bias as `\(C, 1, 1\)`", guide)]
    assert said and all("`unit axes`" in guide[i : i + 200] for i in said)
    assert "`--budget SECONDS`" in guide and "#a-budget-budget-seconds" in guide


def test_the_readme_is_short_and_links_to_pages_that_exist():
    readme = (ROOT / "README.md").read_text()
    # A front page: the uses, the install, the commands, exit status, reliability and the three tables
    # the issues asked for there (ports side by side, the model oracle's benchmark); the rest is the site.
    assert len(readme.splitlines()) <= 240
    for target in re.findall(r"\]\(((?:docs|examples)/[^)#]+)", readme):
        assert (ROOT / target).exists(), target
