"""Sessions: ``nox -s tests``, ``nox -s crosscheck`` (the sweep), ``nox -s lint``, ``nox -s docs``,
``nox -s bench``, ``nox -s bench_sweep``, ``nox -s memory``, ``nox -s zoo``, ``nox -s docs-claims``.

Every session installs this project from the working tree (the distribution ``crosscheck-gradients``;
the import package and the command are ``crosscheck``) with ``constraints.txt``.
"""

from __future__ import annotations

import nox

nox.options.sessions = ["lint", "tests", "crosscheck"]
nox.options.default_venv_backend = "virtualenv"

CONSTRAINTS = ("-c", "constraints.txt")


def _install(session: nox.Session, extras: str = "all") -> None:
    session.install(f".[{extras}]", *CONSTRAINTS)


@nox.session
def tests(session: nox.Session) -> None:
    """Run the test suite against the installed package."""
    _install(session, "all,test")
    session.run("pytest", *session.posargs)


@nox.session
def crosscheck(session: nox.Session) -> None:
    """Run crosscheck sweep ([tool.crosscheck] if any, else the built-in CI matrix); fails on a mismatch.

    Cases run on one worker process per CPU; arguments after ``--`` pass through (``-- --jobs 1``).
    """
    _install(session)
    session.run("python", "-m", "crosscheck", "sweep", *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    """Run ruff (lint and format check), mypy and import-linter (the layers in pyproject.toml), over
    crosscheck and the adapters in backends/ (a top-level package there: the editable install below puts
    the repository on the path, so both tools find it).

    Installs no framework: mypy reads the types of numpy, rich and tomli (Python 3.10's TOML reader)
    and skips JAX's and PyTorch's.
    """
    # import-linter 2.17: "a | b" layers and the "protected" contract type (pyproject.toml). The lint
    # tools are pinned in constraints.txt: CI runs this session, and a new rule must not fail a clean clone.
    session.install("ruff", "import-linter>=2.17", "mypy", "numpy", "rich", "tomli", *CONSTRAINTS)
    # The package itself, without its dependencies, so that both tools resolve `crosscheck`.
    session.install("-e", ".", "--no-deps")
    session.run("ruff", "check", ".", *session.posargs)
    session.run("ruff", "format", "--check", "--diff", ".")
    session.run("mypy")
    session.run("lint-imports")


@nox.session
def docs(session: nox.Session) -> None:
    """Build the documentation site (MkDocs Material, the API from the docstrings) with ``--strict``.

    Installs no framework: the site's command-line reference comes from the parser, which imports
    neither JAX nor PyTorch, and mkdocstrings reads the docstrings without importing the package.
    ``nox -s docs -- serve`` serves it on http://127.0.0.1:8000 instead.
    """
    _install(session, "docs")
    quiet = {"NO_MKDOCS_2_WARNING": "1"}  # Material's banner about its successor, on every build
    if session.posargs[:1] == ["serve"]:
        session.run("mkdocs", "serve", *session.posargs[1:], env=quiet)
    else:
        session.run("mkdocs", "build", "--strict", *session.posargs, env=quiet)


@nox.session(name="docs-claims")
def docs_claims(session: nox.Session) -> None:
    """Re-run every claim the docs mark (``<!-- claim: ... -->``), the slow ones too (benchmarks, GPT-2):
    ``tests/docs/test_docs_claims.py`` with ``CROSSCHECK_CLAIMS=all``; ``nox -s tests`` runs the cheap ones.
    """
    _install(session, "all,port,test")
    claims = "tests/docs/test_docs_claims.py"
    session.run("pytest", claims, *session.posargs, env={"CROSSCHECK_CLAIMS": "all"})


@nox.session
def zoo(session: nox.Session) -> None:
    """Run the zoo of Hugging Face ports (``benchmarks/zoo.py``): each architecture and planted bug in
    its own ``crosscheck run``, one table row each; arguments after ``--`` pass through
    (``-- --arch bert,llama --reference torch,numpy-fd --markdown zoo.md``).
    """
    _install(session, "all,port")
    session.run("python", "benchmarks/zoo.py", *session.posargs)


@nox.session
def memory(session: nox.Session) -> None:
    """Tabulate residual bytes and measure peak memory of checkpointed and plain variants."""
    _install(session)
    session.run("python", "-m", "crosscheck", "memory", *session.posargs)


@nox.session
def bench(session: nox.Session) -> None:
    """Benchmark the oracle against torch.autograd.gradcheck (prints a table)."""
    _install(session)
    session.run("python", "benchmarks/bench_oracle.py", *session.posargs)


@nox.session
def bench_sweep(session: nox.Session) -> None:
    """Cases per second of a sweep: in process, one worker, N workers, a Dask LocalCluster (a table)."""
    _install(session, "all,dask")
    session.run("python", "benchmarks/bench_sweep.py", *session.posargs)
