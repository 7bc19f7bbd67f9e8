"""``python -m crosscheck``: the same program as the ``crosscheck`` command."""

from crosscheck._cli.main import console

console()
