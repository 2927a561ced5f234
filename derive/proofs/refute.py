"""A claim SymPy could not prove, tried at numbers: a counter-example, or none.

SymPy's simplification proves an identity or a bound where it finds the way; where it does not,
the claim may still be true (Cauchy–Schwarz bounds a cosine score, and no rewriting SymPy knows
shows it). Before a document calls such a claim false, `counterexample` looks for values at
which it fails: the sizes small and fixed (n = 3, d = 2, c = 4, h = 2, so c_h = 2; any other
size 2), the free indices and the parameters drawn at random within what their symbols assume,
every sum written out, every entry of an input drawn from (−3/2, 3/2), both sides evaluated to
30 digits. A claim that fails at some draw by more than 10⁻⁹ of its size is false there, and the
values say where; a claim that holds at every draw is called unproved, never false. The draws
are seeded: the same claim gets the same verdict every time.
"""

from __future__ import annotations

import random

import sympy as sp
from sympy import Indexed

from ..notation import letters as L
from ..notation.plain import plain

__all__ = ["counterexample", "SIZES", "DRAWS"]

#: The sizes a claim is tried at (c_h = c / h), and the value of any other size.
SIZES = {
    L.n: 3,
    L.d: 2,
    L.c: 4,
    L.h: 2,
    L.c_h: 2,
    L.s: 3,
    L.d_y: 2,
    L.w: 2,
    L.g: 1,
    L.d_u: 2,
    L.c_r: 2,
    L.B_r: 2,
    L.B_c: 2,
}
_OTHER_SIZE = 2
#: How far each index runs at those sizes.
_INDICES = {
    L.m: 3,
    L.p: 3,
    L.r: 3,
    L.t: 3,
    L.i: 2,
    L.j: 2,
    L.j2: 2,
    L.f: 2,
    L.ell: 2,
    L.nu: 1,
    L.b: 1,
}
#: How many draws a claim is tried at.
DRAWS = 4
_TOLERANCE = sp.Rational(1, 10**9)


def _value(symbol: sp.Symbol, rng: random.Random) -> sp.Expr:
    """A number the symbol's assumptions allow."""
    if symbol in SIZES:
        return sp.Integer(SIZES[symbol])
    if symbol in _INDICES:
        return sp.Integer(rng.randint(1, _INDICES[symbol]))
    if symbol.is_integer:
        return sp.Integer(1 if symbol.is_nonnegative is None else _OTHER_SIZE)
    if symbol.is_positive or symbol.is_nonnegative:
        return sp.Rational(rng.randint(3, 20), 8)
    return sp.Rational(rng.randint(-16, 16), 8)


def _draw(sides: tuple[sp.Expr, ...], rng: random.Random) -> tuple[dict, list[sp.Expr]] | None:
    """Both sides at one draw: (the values drawn, the sides as numbers), or None where they do
    not evaluate to finite real numbers."""
    labels = {e.base.label for side in sides for e in side.atoms(Indexed)}  # x of x_{m,i}
    symbols = sorted(set().union(*(side.free_symbols for side in sides)) - labels, key=str)
    scalars = {s: _value(s, rng) for s in symbols if not isinstance(s, Indexed)}
    try:
        sized = [side.xreplace(scalars).doit() for side in sides]
        entries = sorted(set().union(*(side.atoms(Indexed) for side in sized)), key=str)
        drawn = {e: sp.Rational(rng.randint(-12, 12), 8) for e in entries}
        numbers = [sp.N(side.xreplace(drawn), 30) for side in sized]
    except Exception:  # noqa: BLE001 - a side SymPy cannot evaluate: no verdict from this draw
        return None
    if not all(x.is_number and x.is_real and x.is_finite for x in numbers):
        return None
    return scalars | drawn, numbers


def counterexample(
    smaller: sp.Expr, larger: sp.Expr, *, equal: bool, seed: int = 0
) -> tuple[tuple[str, str], ...]:
    """Values at which ``smaller = larger`` (`equal`) or ``smaller ≤ larger`` fails, as (what,
    value) pairs (the sizes, indices and parameters, up to six entries, then both sides), or ()
    where every draw satisfies it or none evaluates. Both sides are written in the inputs."""
    rng = random.Random(seed)
    for _ in range(DRAWS):
        found = _draw((sp.sympify(smaller), sp.sympify(larger)), rng)
        if found is None:
            continue
        values, (left, right) = found
        gap = left - right
        size = _TOLERANCE * (1 + abs(left) + abs(right))
        fails = abs(gap) > size if equal else gap > size
        if fails:
            scalars = [(plain(k), str(v)) for k, v in values.items() if not isinstance(k, Indexed)]
            entries = [(plain(k), str(v)) for k, v in values.items() if isinstance(k, Indexed)]
            shown = entries[:6] + (
                [("…", f"{len(entries) - 6} more entries")] if len(entries) > 6 else []
            )
            return (
                *scalars,
                *shown,
                ("left side", f"{float(left):.6g}"),
                ("right side", f"{float(right):.6g}"),
            )
    return ()
