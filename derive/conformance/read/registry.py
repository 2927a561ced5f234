"""Which adapter reads a module: the registered ones first (the last registered first), then
the built-in conventions (`derive.conformance.read.conventions`)."""

from __future__ import annotations

import difflib
from typing import Any

from .adapters import Adapter, registered
from .conventions import BUILT_IN
from .target import ConformError

__all__ = ["adapters", "find_adapter"]


def adapters() -> tuple[Adapter, ...]:
    """Every adapter, in the order they are tried: registered (last first), then built-in."""
    return (*registered(), *BUILT_IN)


def find_adapter(module: Any, name: str | None = None) -> Adapter:
    """The adapter for `module` (or the one named); a ConformError saying what was looked for."""
    every = adapters()
    if name is not None:
        for adapter in every:
            if adapter.name == name:
                return adapter
        names = [a.name for a in every]
        closest = difflib.get_close_matches(name, names, n=1, cutoff=0.6)
        hint = f" (did you mean {closest[0]!r}?)" if closest else ""
        raise ConformError(f"no adapter {name!r}{hint}; known: {', '.join(names)}")
    for adapter in every:
        try:
            if adapter.recognises(module):
                return adapter
        except Exception:  # noqa: BLE001 - a recogniser that fails does not recognise
            continue
    looked = "; ".join(f"{a.looks_for} ({a.name})" for a in every if a.looks_for)
    raise ConformError(
        f"no adapter finds the weights of {type(module).__name__}: looked for {looked}; "
        "register one for your convention with derive.testing.register_adapter"
    )
