"""The sizes an entry is written out at, and those a check draws.

`explicit_sizes`: n, d, c, its own sizes (given, or their defaults), those its relations fix
(c_h = c / h), its parameters; every condition it states checked, a ValueError that names the
sizes and the reason otherwise. `drawn_sizes`: the sizes of a random trial, every condition of
the entry and of its draws holding (n ≥ 2: one token tests nothing).
"""

from __future__ import annotations

import random
import sys
from collections.abc import Mapping
from typing import Any

import sympy as sp

from ..notation import letters as L
from .entry import Entry
from .registry import declared, variants

__all__ = ["explicit_sizes", "not_its_own", "drawn_sizes", "with_relations", "check_given"]


def with_relations(entry: Entry, sizes: dict) -> dict:
    """The sizes, with those the entry's relations fix where the sizes they read are known
    (c_h = c / h: a number, an integer only where h divides c)."""
    known = dict(sizes)
    for relation in entry.graph.relations:
        value = sp.sympify(relation.rhs).xreplace(known)
        if value.is_number:
            known[relation.lhs] = int(value) if value.is_Integer else value
    return known


def _fits(entry: Entry, sizes: dict) -> bool:
    """No condition of the entry (nor of its draws) fails at these sizes (some may be unknown)."""
    known = with_relations(entry, sizes)
    if any(not sp.sympify(v).is_Integer for k, v in known.items() if k in L.SIZES):
        return False
    return all(c.holds(known) is not False for c in (*entry.requires, *entry.draws))


def drawn_sizes(
    entry: Entry, rng: random.Random, given: Mapping[str, object], *, limits: tuple[int, int]
) -> dict[str, Any]:
    """n, d, c and the entry's own sizes: those given; the others drawn, pairwise distinct where
    that is possible (so that a swapped axis cannot pass by coincidence), from 1 … limits[0]
    (then up to limits[1]) where every condition of the entry holds; an entry's own size not
    given takes its default; and the entry's parameters given, as given (a check checks the
    values it is told). A ValueError names a condition the given sizes break, or a size given
    that is not the entry's (another variant's, which would be ignored)."""
    own = {str(s.symbol) for s in (*entry.sizes, *entry.parameters)} | {"n", "d", "c"}
    unknown = sorted(name for name, value in given.items() if value is not None and name not in own)
    if unknown:
        raise ValueError(not_its_own(entry, unknown[0]))
    check_given(entry, given)
    symbols = {str(s.symbol): s.symbol for s in entry.sizes} | {"n": L.n, "d": L.d, "c": L.c}
    sizes: dict[sp.Symbol, Any] = {L.n: given.get("n"), L.d: given.get("d"), L.c: given.get("c")}
    sizes |= {s.symbol: given.get(str(s.symbol)) or s.default for s in entry.sizes}
    values = {
        p.symbol: given[str(p.symbol)]
        for p in entry.parameters
        if given.get(str(p.symbol)) is not None
    }  # the parameters given: the values checked, never the defaults in their place
    fixed = {k: v for k, v in sizes.items() if v is not None}
    known = with_relations(entry, fixed) | values
    for condition in (*entry.requires, *entry.draws):
        if condition.holds(known) is False:
            raise ValueError(condition.message(known))
    for name in ("c", "n", "d"):  # c first: the heads (and RoPE) decide what it may be
        if sizes[symbols[name]] is not None:
            continue
        fits: list[int] = []
        for limit in limits:
            fits = [v for v in range(1, limit + 1) if _fits(entry, fixed | {symbols[name]: v})]
            if fits:
                break
        if not fits:
            raise ValueError(f"no {name} up to {limits[-1]} meets the conditions of {entry.name}")
        fresh = [v for v in fits if v not in fixed.values()]
        fixed[symbols[name]] = rng.choice(fresh or fits)
    drawn: dict[str, Any] = {str(symbol): int(value) for symbol, value in fixed.items()}
    return drawn | {str(symbol): value for symbol, value in values.items()}


def check_given(entry: Entry, given: Mapping[str, object]) -> None:
    """Each size and parameter given within its domain, then every condition of the entry that
    the values given decide; a ValueError naming the first that is not. The domain is read off
    the symbol the declaration gives it (SymPy's assumptions: ``positive=True``, ``integer=True``
    …), so a user's ``sp.Symbol("tau", positive=True)`` gets one without another word; every
    value is a finite real number. The conditions are the entry's (κ > 0 is the symbol's,
    α_h > α_l Llama 3.1's, an even c_r partial RoPE's)."""
    symbols = {str(x.symbol): x.symbol for x in (*entry.sizes, *entry.parameters)}
    sizes = {str(x.symbol) for x in entry.sizes}
    known: dict[sp.Symbol, sp.Expr] = {}
    for name, value in given.items():
        if value is None or name not in symbols:
            continue
        symbol, number = symbols[name], sp.sympify(value)
        integer = name in sizes or bool(symbol.is_integer)  # a size counts: a positive integer
        positive = name in sizes or bool(symbol.is_positive)
        nonnegative = bool(symbol.is_nonnegative)
        signs = (
            (positive, "positive"),
            (nonnegative, "non-negative"),
            (symbol.is_negative, "negative"),
            (symbol.is_nonzero, "non-zero"),
        )
        sign = next((word for holds, word in signs if holds), "")
        kind = "an integer" if integer else "a finite number (within float64's range)"
        kind = f"a {sign} {kind.removeprefix('an ').removeprefix('a ')}" if sign else kind
        fits = number.is_real is True and number.is_finite is True
        fits = fits and abs(number) <= sys.float_info.max  # the twins compute in float64
        fits = fits and (number.is_integer is True or not integer)
        fits = fits and (number.is_positive is True or not positive)
        fits = fits and (number.is_nonnegative is True or not nonnegative)
        fits = fits and (number.is_negative is True or not symbol.is_negative)
        fits = fits and (number.is_nonzero is True or not symbol.is_nonzero)
        if not fits:
            shown = value if isinstance(value, int | float | str) else number
            shown = shown if len(str(shown)) <= 24 else sp.N(number, 3)  # 1.00e+400, not 401 digits
            raise ValueError(f"{entry.name}: {name} must be {kind}, got {name}={shown}")
        known[symbol] = number
    for condition in entry.requires:
        if condition.holds(known) is False:
            raise ValueError(f"{entry.name}: {condition.message(known)}")


def explicit_sizes(entry: Entry, n: int, d: int, c: int, given: Mapping[str, object]) -> dict:
    """n, d, c, the entry's own sizes (given by name, or their defaults), the sizes its
    relations fix (c_h = c / h) and its parameters (numbers, or defaults in the sizes); a
    ValueError naming the sizes that do not fit together, with the reason."""
    sizes: dict[sp.Symbol, sp.Expr] = {L.n: n, L.d: d, L.c: c}
    sizes |= {s.symbol: given.get(str(s.symbol), s.default) for s in entry.sizes}
    unknown = set(given) - {str(s.symbol) for s in (*entry.sizes, *entry.parameters)}
    if unknown:
        raise ValueError(not_its_own(entry, sorted(unknown)[0]))
    check_given(entry, given)
    for known in (sizes, with_relations(entry, sizes)):  # then those that read c_h
        for condition in entry.requires:
            if condition.holds(known) is False:
                raise ValueError(condition.message(known))
    sizes = with_relations(entry, sizes)
    parameters = {
        p.symbol: sp.sympify(given.get(str(p.symbol), p.default)).xreplace(sizes)
        for p in entry.parameters
    }
    return sizes | parameters


def not_its_own(entry: Entry, name: str) -> str:
    """The message for a size or parameter the entry does not have: its own, and whose it is."""
    own = [str(s.symbol) for s in (*entry.sizes, *entry.parameters)]
    owners = [
        v
        for v in variants()
        if name in {str(s.symbol) for s in (*declared(v).sizes, *declared(v).parameters)}
    ]
    whose = f" ({name} is a size of {' and '.join(owners)})" if owners else ""
    shapes = entry.graph.shapes
    matrices = {L.name_of(x): x for x in entry.graph.inputs} | {x: x for x in entry.graph.inputs}
    if name in matrices:  # a matrix it reads, such as a learnable 1 × 1 s: drawn, not given
        letter = matrices[name]
        rows, cols = shapes[letter]
        whose = (
            f" ({name} is a matrix it reads, {rows} × {cols}: check draws its entries at random, "
            "as every input's; --value gives a number the declaration names as a parameter)"
        )
    return (
        f"{entry.name} has no size {name!r}{whose}; its own: "
        f"{', '.join(own) or 'none beyond n, d, c'}"
    )
