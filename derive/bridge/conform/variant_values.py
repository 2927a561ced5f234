"""What a module's variant adds to a run of `derive conform`: its sizes and parameters, each the
value the adapter read or the variant's default, and the matrices it reads besides the W's."""

from __future__ import annotations

from typing import Any

import sympy as sp

from ...graph import registry
from ...notation import letters as L
from .target import ConformError

__all__ = ["variant_sizes", "variant_inputs", "at_sizes", "registered_names"]

#: The sizes a run gives itself (n, d, c, h, c_h, g): never a variant's default.
_OWN = frozenset({L.n, L.d, L.c, L.h, L.c_h, L.g})


def _entry(name: str, adapter: str) -> Any:
    try:
        return registry.variant(name)
    except ValueError as error:
        raise ConformError(f"variant {name!r}: {error}") from None


def variant_sizes(name: str, values: dict[str, Any], adapter: str) -> dict:
    """Every size and parameter the variants of `name` read, by symbol: the value given in
    `values` (by the symbol's name), else the variant's default (an expression where it reads
    the run's sizes: `at_sizes` evaluates it)."""
    if not name:
        if values:
            raise ConformError(f"adapter {adapter}: values {sorted(values)} given, but no variant")
        return {}
    entry = _entry(name, adapter)
    known = {str(s.symbol): (s.symbol, s.default) for s in entry.sizes if s.symbol not in _OWN}
    known |= {str(p.symbol): (p.symbol, p.default) for p in entry.parameters}
    unknown = sorted(set(values) - set(known))
    if unknown:
        reads = ", ".join(known) or "no value"
        raise ConformError(
            f"values {unknown} (adapter {adapter}'s or given) are not read by "
            f"{name} (it reads {reads})"
        )
    return {
        symbol: sp.sympify(values.get(key, default)) for key, (symbol, default) in known.items()
    }


def at_sizes(values: dict, sizes: dict) -> dict:
    """Each value at the run's sizes (a default may read them: sigmoid attention's b = −log n),
    as a number."""
    at = {symbol: sp.sympify(value) for symbol, value in sizes.items()}
    found = {}
    for symbol, value in values.items():
        number = sp.sympify(value).xreplace(at)
        if number.free_symbols:
            raise ConformError(
                f"the value of {symbol}, {value}, reads a size the run does not "
                f"have ({', '.join(map(str, number.free_symbols))})"
            )
        found[symbol] = int(number) if number.is_Integer else float(number)
    return found


def registered_names(variant: str) -> str:
    """`variant` with each user's declaration (``path/to/file.py:NAME``, ``module:NAME``)
    loaded and registered, and named by its name."""
    from ...graph import DeclarationError, load_variant
    from ...graph.user_code import UserCodeError

    parts = []
    for part in (p for p in variant.split("+") if p):
        if ":" not in part:
            parts.append(part)
            continue
        try:
            parts.append(load_variant(part).name)
        except (DeclarationError, UserCodeError) as error:
            raise ConformError(f"variant {part}: {error}") from None
    return "+".join(parts)


def variant_inputs(name: str, inputs: dict[str, Any], adapter: str) -> dict[str, Any]:
    """The matrices the variants of `name` read besides X and the W's, checked present."""
    if not name:
        return {}
    graph = _entry(name, adapter).graph
    needed = [x for x in graph.inputs if x not in ("X", "W_q", "W_k", "W_v", "W_o", "M")]
    missing = [x for x in needed if x not in inputs]
    if missing:
        raise ConformError(
            f"adapter {adapter}: variant {name} reads {', '.join(missing)}; "
            "give them in Weights(inputs={...})"
        )
    extra = sorted(set(inputs) - set(needed))
    if extra:
        raise ConformError(
            f"adapter {adapter}: inputs {extra} are not read by {name} "
            f"(it reads {', '.join(needed) or 'none'})"
        )
    return {letter: inputs[letter] for letter in needed}
