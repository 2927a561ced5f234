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
    roots = [
        e
        for e in expr.atoms(sp.Pow)
        if e.exp.is_Rational and not e.exp.is_Integer and e.base.has(Sum) and e.free_symbols <= free
    ]
    if not roots:
        return expr
    bases = {e.base for e in roots}
    holders = {base: sp.Dummy("rho", positive=True) for base in bases}
    held = expr.xreplace({b: h**2 for b, h in holders.items()})
    held = sp.factor_terms(sp.together(held))
    return held.xreplace({h: sp.sqrt(b) for b, h in holders.items()})


#: The index the book gives a row or a column over each size, where a letter does not say.
_ROW = {L.n: L.m, L.s: L.p, L.d: L.i, L.d_y: L.i, L.c: L.j, L.c_h: L.j, L.d_u: L.f, L.h: L.ell}
_COLUMN = {
    L.n: L.p,
    L.s: L.p,
    L.d: L.i,
    L.d_y: L.i,
    L.c: L.j,
    L.c_h: L.j,
    L.c_r: L.j,
    L.d_u: L.f,
    L.h: L.ell,
}


def book_indices(letter: str, shape: tuple | None = None) -> tuple[sp.Expr, sp.Expr]:
    """The indices the book gives an entry of this matrix (its gradient's alike): those its
    `Letter` declares ((m, p) for Ω, (p, j) for K, (i, j) for W_q, (1, ℓ) for one number per
    head), else read off its shape (`shape`, or the letter's own): a row or a column of one is
    1, of n tokens m and p, of d features i, of c features j (j and j' for a c × c matrix),
    of h heads ℓ; (m, j) where the shape says nothing."""
    name = L.name_of(letter.removeprefix("d") if L.is_gradient(letter) else letter)
    record = L.LETTERS.get(name)
    if record is not None and record.indices:
        return tuple(sp.sympify(index) for index in record.indices)
    rows, cols = shape or (record.shape if record is not None and record.shape else (None, None))
    if rows is None:
        return L.m, L.j
    row = sp.S.One if rows == 1 else _ROW.get(rows, L.m)
    col = sp.S.One if cols == 1 else _COLUMN.get(cols, L.j)
    if row == col and row != 1:
        col = {L.j: L.j2, L.m: L.t, L.p: L.t, L.ell: L.ell2}.get(row, col)
    return row, col
