"""Import strings ``package.module:attribute``, resolved for a backend or a workload, with the messages
that say what is wrong: a file path where a module was meant (and the module name to use), a module that
cannot be imported or raises, an attribute that is not there (and the nearest that is)."""

from __future__ import annotations

import difflib
import importlib
import os
import sys
from pathlib import Path

from crosscheck._backends.protocol import BackendBroken
from crosscheck._errors import describe, reraise_user_interrupt


def import_attribute(target: str, *, spec: str | None = None, kind: str = "backend") -> object:
    """The attribute an import string ``package.module:attribute`` names (``spec``: what the user
    wrote, for messages; ``kind``: what is being loaded, ``backend`` or ``workload``)."""
    spec = spec or target
    module_name, _, attribute = target.partition(":")
    if not module_name or not attribute:
        raise ValueError(f"{kind} import string `{spec}` must look like `package.module:attribute`.")
    if _looks_like_a_path(module_name):
        raise ValueError(f"{kind} `{spec}` names a path: {_module_hint(module_name, attribute)}.")
    if os.getcwd() not in sys.path:
        # Like `python -m`, let users name a module in the current directory.
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise ValueError(f"{kind} `{spec}`: cannot import module `{module_name}` ({exc}).") from exc
    except BaseException as exc:  # its sys.exit too: importing it failed, the run goes on to say so
        reraise_user_interrupt(exc)
        # A backend's module that raises is that backend's failure (as a plugin's), not the user's mistake.
        error = BackendBroken if kind == "backend" else ValueError
        message = f"{kind} `{spec}`: importing `{module_name}` failed: {describe(exc, f'`{module_name}`')}"
        raise error(message) from exc
    value: object = module
    for part in attribute.split("."):
        found = getattr(value, part, _MISSING)  # once: a module's __getattr__ may build it (a zoo port)
        if found is _MISSING:
            names = [n for n in dir(value) if not n.startswith("_")]
            close = difflib.get_close_matches(part, names, n=1)
            guess = f"did you mean `{close[0]}`? " if close else ""
            raise ValueError(
                f"{kind} `{spec}`: module `{module_name}` has no attribute `{attribute}` "
                f"({guess}found: {', '.join(names[:12]) or 'nothing public'})."
            )
        value = found
    return value


_MISSING = object()


def _looks_like_a_path(module_name: str) -> bool:
    """Whether an import string's module part is a file or folder path (``./model.py``, ``a/b``)."""
    return module_name.endswith(".py") or "/" in module_name or os.sep in module_name or module_name[0] == "."


def _module_hint(path: str, attribute: str) -> str:
    """How to name the file ``path`` as a module: its name from its folder, and its dotted path from
    here where every folder on the way is a package (``examples/port/convnet.py`` ->
    ``examples.port.convnet``)."""
    file = Path(path.removesuffix(".py"))
    if str(file.parent) == ".":
        return f"use its module name, `{file.name.lstrip('.')}:{attribute}`"
    example = f"`{file.name}:{attribute}`, run in {file.parent}"
    hint = f"use `module:attribute` from the file's folder (e.g. {example})"
    parts = Path(os.path.normpath(file)).parts
    packages = all((Path(*parts[: i + 1]) / "__init__.py").is_file() for i in range(len(parts) - 1))
    if len(parts) > 1 and packages and ".." not in parts and not file.is_absolute():
        hint += f" or its dotted name from here (`{'.'.join(parts)}:{attribute}`)"
    return hint
