"""A user's variant, read from a file (``path/to/file.py:NAME``) or a module (``module:NAME``)
and registered (`derive.graph.registry.register_variant`)."""

from __future__ import annotations

from pathlib import Path

from .registry import DeclarationError, Entry, register_variant, registered, variant
from .user_code import UserCodeError, import_file, import_named
from .variant import Variant

__all__ = ["load_variant", "spec_of"]

#: How each variant loaded in this process was named (``path/to/file.py:NAME``), by its name.
_SPECS: dict[str, str] = {}


def spec_of(name: str) -> str | None:
    """The file or module a user's variant was loaded from (``path.py:NAME``), or None."""
    return _SPECS.get(name)


def load_variant(spec: str) -> Entry:
    """The variant a spec names, registered: ``path/to/file.py:NAME`` (the file loaded, its
    folder on the import path while it loads) or ``package.module:NAME`` (imported); NAME is a
    `Variant` in it. A plain registered name resolves as `variant` does. A file is run once per
    process.

    Args:
        spec: `"path/to/file.py:NAME"`, `"package.module:NAME"`, or a registered name or
            combination (`"gqa+rope"`).

    Returns:
        The `Entry` of the variant, registered under its own name (`Variant.name`).

    Raises:
        DeclarationError: when the spec is malformed, the file does not exist or fails to
            run, the module does not import, NAME is missing or not a `Variant`, or the
            variant does not register (`register_variant`).
        ValueError: when a plain name is not registered (as `variant` raises it).
    """
    where, colon, attribute = spec.rpartition(":")
    if not colon:
        return variant(spec)
    if not where or not attribute:
        raise DeclarationError(
            f"a variant is NAME, path/to/file.py:NAME or module:NAME, got {spec!r}"
        )
    module = _from_file(Path(where)) if where.endswith(".py") or "/" in where else _module(where)
    found = getattr(module, attribute, None)
    if found is None:
        known = [k for k, v in vars(module).items() if isinstance(v, Variant)]
        raise DeclarationError(
            f"{where} has no variant {attribute!r} (its variants: {', '.join(known) or 'none'})"
        )
    if not isinstance(found, Variant):
        raise DeclarationError(
            f"{where}:{attribute} is a {type(found).__name__}, not a derive.Variant"
        )
    if registered(found.name) is not found:
        register_variant(found)
    _SPECS[found.name] = spec
    return variant(found.name)


def _module(where: str):
    try:
        return import_named(where)
    except UserCodeError as error:
        raise DeclarationError(str(error)) from None


#: The files loaded in this process, by their resolved path: each is run once.
_LOADED: dict[str, object] = {}


def _from_file(path: Path):
    key = str(path.resolve()) if path.is_file() else ""
    if key in _LOADED:
        return _LOADED[key]
    if not path.is_file():
        raise DeclarationError(f"no file {str(path)!r} (a variant is path/to/file.py:NAME)")
    name = "_derive_variant_" + "".join(ch if ch.isalnum() else "_" for ch in str(path.resolve()))
    try:
        module = import_file(path, name, keep=(DeclarationError,))
    except DeclarationError as error:
        raise DeclarationError(f"{path}: {error}") from None
    except UserCodeError as error:
        raise DeclarationError(str(error)) from None
    _LOADED[key] = module
    return module
