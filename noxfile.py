"""Sessions: ``nox -s tests``, ``nox -s crosscheck`` (the CI matrix), ``nox -s lint``, ``nox -s bench``."""

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
    """Run the CI matrix of cases; exits non-zero on any disagreement."""
    _install(session)
    session.run("python", "-m", "crosscheck", "matrix", *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    """Run ruff (lint and format check)."""
    session.install("ruff")
    session.run("ruff", "check", ".", *session.posargs)
    session.run("ruff", "format", "--check", "--diff", ".")


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
