"""How a derived gradient entry is written: the indices the book gives each matrix's entries,
and roots of a row's statistic held together while SymPy puts the terms over one denominator."""

from __future__ import annotations

import sympy as sp
from sympy import Sum

from ..notation import letters as L

__all__ = ["book_indices", "compact_roots"]


def compact_roots(expr: sp.Expr) -> sp.Expr:
    """Each root of a row's statistic (√(Σ_j' q_{m,j'}²/c + ε)) held as one symbol while SymPy
    puts the terms over one denominator, then put back."""
    free = expr.free_symbols  # a root that reads a summation index stays inside its sum
    roots = [e for e in expr.atoms(sp.Pow) if e.exp.is_Rational and not e.exp.is_Integer
             and e.base.has(Sum) and e.free_symbols <= free]  # fmt: skip
    if not roots:
        return expr
    bases = {e.base for e in roots}
    holders = {base: sp.Dummy("rho", positive=True) for base in bases}
    held = expr.xreplace({b: h**2 for b, h in holders.items()})
    held = sp.factor_terms(sp.together(held))
    return held.xreplace({h: sp.sqrt(b) for b, h in holders.items()})


def book_indices(letter: str) -> tuple[sp.Symbol, sp.Symbol]:
    """The indices the book gives an entry of this matrix: (m, p), (m, j), (i, j), (m, i)."""
    name = L.name_of(letter)
    if name in ("wq", "wk", "wv", "wo", "wg"):
        return L.i, L.j
    if name == "wdkv":
        return L.i, L.f
    if name in ("wuk", "wuv"):
        return L.f, L.j
    if name in ("gq", "gk"):  # a gain: the one row of γ
        return sp.S.One, L.j
    if name in ("mu", "sink"):  # ALiBi's slope, a sink's logit: head ℓ's, in the one row
        return sp.S.One, L.ell
    if name == "u":
        return L.m, L.f
    if name == "rot":
        return L.j2, L.j
    if name in ("omega", "omegatilde", "omegacap", "omegabias", "omegahat", "a", "mask", "gap"):
        return L.m, L.p
    if name in ("k", "v", "krot", "knorm"):  # a key or a value: token p, as in ω_{m,p}
        return L.p, L.j
    if name == "y":
        return L.p, L.i
    return (L.m, L.i) if name == "x" else (L.m, L.j)
