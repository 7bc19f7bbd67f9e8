"""Hostile crosscheck backends (test fixture): a factory and an info() that call sys.exit(0), a factory
that returns None, and a backend whose grad returns None."""

import sys


def exit_factory():
    sys.exit(0)


def none_factory():
    return None


class ExitInfo:
    name = "exit-info"

    def grad(self, weights, x):
        raise NotImplementedError("only listed, never run")

    def info(self):
        sys.exit(0)


class NoneGrad:
    name = "none-grad"

    def grad(self, weights, x):
        return None
