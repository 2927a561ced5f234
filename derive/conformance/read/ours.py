"""This package's own modules (`attention.modules`): the modifications each was built with read
from the objects its forward uses (`attention.mods`, the module's `score_mods` with its tensors,
`module_mods`): the registry's variant that declares each kind and the numbers and matrices
that variant reads. A variant that gives its twins an object (``mods=(Built("attention.mods.
Chunked", (χ,)),)``) says so itself, and the object's fields, in order, are the values of
those symbols: such a variant, a user's registered one included, needs no row here. The kinds
the keywords give (a softcap, ALiBi's slopes, the sinks' logits) have their row below. A kind
with neither is refused by name."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import sympy as sp

from ...graph.registry import declared, variants
from ...graph.twins import Built
from .target import ConformError

__all__ = ["read_modifications"]

Reading = Callable[[Any], tuple[dict[str, Any], dict[str, Any]]]


def _given() -> dict[type, tuple[str, Reading]]:
    """The kinds the keywords give: (the variant, (values by symbol, matrices by letter))."""
    from attention import mods as M

    return {
        M.Softcap: ("softcap", lambda mod: ({"kappa": mod.cap}, {})),
        M.ALiBi: ("alibi", lambda mod: ({}, {"Mu": mod.slopes[None]})),  # (h,) -> (1, h)
        M.Sinks: ("sinks", lambda mod: ({}, {"Zeta": mod.logits[None]})),
    }


def _fields(kind: type, symbols: tuple) -> Reading | None:
    """The values of `symbols` read from an object's first fields, in order (a `Built`'s
    arguments are its constructor's); None where its factory is not a dataclass (nothing to
    read back). A field after them that is not at its default (a `Chunked` or `Temperature`
    counted from another start) says something the variant does not: refused by name."""
    if not (isinstance(kind, type) and dataclasses.is_dataclass(kind)) or len(symbols) > len(
        dataclasses.fields(kind)
    ):
        return None
    fields = dataclasses.fields(kind)
    pairs = [
        (str(symbol), field.name)
        for symbol, field in zip(symbols, fields, strict=False)
        if isinstance(symbol, sp.Symbol)
    ]
    rest = [field for field in fields[len(symbols) :] if field.default is not dataclasses.MISSING]

    def read(mod: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        reads = ", ".join(symbol for symbol, _ in pairs)
        for field in rest:
            if getattr(mod, field.name) != field.default:
                raise ConformError(
                    f"{type(mod).__name__} has {field.name}={getattr(mod, field.name)!r}, which "
                    f"its registered variant does not declare (it reads {reads})"
                )
        return {symbol: getattr(mod, name) for symbol, name in pairs}, {}

    return read


def _rows() -> dict[type, tuple[str, Reading]]:
    """Each kind of modification: the registry's variants that build it (``mods=``), then the
    keywords' kinds."""
    from ...bridge.evaluate import resolve

    rows: dict[type, tuple[str, Reading]] = {}
    for name in variants():
        for option, value in declared(name).options:
            if option != "mods" or not isinstance(value, tuple):
                continue
            for built in value:
                if isinstance(built, Built):
                    kind = resolve(built.factory, f"variant {name!r}")
                    reading = _fields(kind, built.arguments)
                    if reading is not None:
                        rows[kind] = (name, reading)
    return rows | _given()


def read_modifications(module: Any) -> tuple[list[str], dict[str, Any], dict[str, Any]]:
    """(the variants, their values by symbol name, their matrices by letter) of the score
    modifications `module` was built with; a query scale that is the book's (1/√c_h) is
    no modification."""
    from attention import _modify
    from attention.modules._common import module_mods

    if not hasattr(module, "score_mods"):
        return [], {}, {}
    mods = _modify.resolved(module_mods(module), module.num_heads, module.W_query.weight)
    rows = _rows()
    parts, values, inputs = [], {}, {}
    for mod in mods:
        if mod.query_scale() == module.head_dim:
            continue  # the book's scale, 1/√c_h, said again
        if type(mod) not in rows:
            raise ConformError(
                f"{type(module).__name__} was built with {type(mod).__name__}, which no "
                f"registered variant declares (read: {', '.join(k.__name__ for k in rows)})"
            )
        name, read = rows[type(mod)]
        found_values, found_inputs = read(mod)
        parts.append(name)
        values |= found_values
        inputs |= found_inputs
    return parts, values, inputs
