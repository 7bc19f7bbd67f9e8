"""Imports a module that is not installed, as a plugin with a missing dependency would."""

import crosscheck_no_such_dependency  # noqa: F401


class Backend:
    name = "broken-import"
