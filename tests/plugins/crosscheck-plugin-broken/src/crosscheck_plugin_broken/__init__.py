"""Broken crosscheck backends (test fixture): a missing attribute and a factory that raises."""


def make_backend():
    raise RuntimeError("no licence server")
