"""Running a user's own Python — a file (``path/to/file.py``) or a module (``package.module``) —
for `derive conform`'s targets and the variants `derive` loads, with one account of what went
wrong: an exception by its type and message, ``sys.exit(3)`` by its code (a script's exit must
not become `derive`'s own exit status), a relative import in a file by its line and what to
write instead (a file loaded by path is in no package)."""

import ast
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


def import_file(path: Path, name: str, *, keep: tuple[type[Exception], ...] = ()) -> ModuleType:
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
        relative = _relative_import(path) if isinstance(error, ImportError) else None
        if relative is None:
            raise UserCodeError(f"cannot load {str(path)!r}: {_why(error)}") from None
        line, statement, instead = relative
        raise UserCodeError(
            f"cannot load {str(path)!r}: line {line}, `{statement}`, is a relative import, and "
            f"a file loaded by path is in no package; {instead} (the file's folder is on the "
            "import path while it loads), or name it as package.module:attribute"
        ) from None
    finally:
        sys.path.remove(folder)
    return module


def _relative_import(path: Path) -> tuple[int, str, str] | None:
    """The file's first relative import: its line, the statement, and what to write instead
    (``from .helper import x`` -> ``from helper import x``); None if it has none."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError):
        return None
    found = [node for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.level]
    if not found:
        return None
    node = min(found, key=lambda node: node.lineno)
    if node.level > 1:
        instead = "import from a folder on the import path instead"
    elif node.module is None:  # from . import helper
        instead = f"write `import {', '.join(alias.name for alias in node.names)}`"
    else:
        instead = f"write `{ast.unparse(ast.ImportFrom(node.module, node.names, 0))}`"
    return node.lineno, ast.unparse(node), instead
