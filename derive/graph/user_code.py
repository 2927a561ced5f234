"""Running a user's own Python — a file (``path/to/file.py``) or a module (``package.module``) —
for `derive conform`'s targets and the variants `derive` loads, with one account of what went
wrong: an exception by its type and message, ``sys.exit(3)`` by its code (a script's exit must
not become `derive`'s own exit status)."""

import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

__all__ = ["UserCodeError", "import_file", "import_named"]


class UserCodeError(Exception):
    """The user's code could not be run; the message says why, in one line."""


def _why(error: BaseException) -> str:
    if isinstance(error, SystemExit):
        return f"it called sys.exit({error.code!r}) while being imported"
    return f"{type(error).__name__}: {error}"


def import_named(where: str) -> ModuleType:
    """The module ``where`` (dotted), imported."""
    try:
        return importlib.import_module(where)
    except (Exception, SystemExit) as error:  # noqa: BLE001 - any failure of the user's import
        raise UserCodeError(f"cannot import module {where!r}: {_why(error)}") from None


def import_file(
    path: Path, name: str, *, keep: tuple[type[Exception], ...] = ()
) -> ModuleType:
    """The file at `path`, run as the module `name`: put in `sys.modules` first (dataclasses and
    pickling look a module up by name), its folder on the import path while it runs. Errors of
    the types in `keep` (the caller's own, raised by its API inside the file) pass unchanged."""
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise UserCodeError(f"cannot load {str(path)!r} as Python")
    module = importlib.util.module_from_spec(spec)
    folder = str(path.resolve().parent)
    sys.modules[name] = module
    sys.path.insert(0, folder)
    try:
        spec.loader.exec_module(module)
    except (Exception, SystemExit) as error:  # noqa: BLE001 - any failure of the user's code
        del sys.modules[name]
        if isinstance(error, keep):
            raise
        raise UserCodeError(f"cannot load {str(path)!r}: {_why(error)}") from None
    finally:
        sys.path.remove(folder)
    return module
