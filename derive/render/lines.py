r"""Aligned lines from SymPy equations: one equation, or a chain ``a &= b``, ``&= c`` …

A line wider than the page (about `WIDEST_LINE` visible characters at 11 pt with the documents'
margins) is broken where the formula allows it: between the terms of a sum, between the factors
of a product, inside the bracket of a sum sign (``\sum_j \Bigl( … \\ … \Bigr)``), and a long
left-hand side gets a line of its own. The continuation lines are indented with ``\quad``.
"""

from __future__ import annotations

import re

import sympy as sp

from ..explicit.display import packed, visible_width
from ..notation import latex
from ..notation.printer import ordered_terms, term_key
from ..proofs import Fact

__all__ = ["equation", "chain", "fact_lines", "shape", "WIDEST_LINE"]


_RELATION = {"==": "=", "<=": r"\le", "<": "<", ">=": r"\ge", ">": ">"}

#: Past this many visible characters a line is broken (the widest line of the self-attention
#: derivation has 95 and fits; the documents' text is about 96 characters of formula wide).
WIDEST_LINE = 96
#: The broken pieces are packed into lines of about this many visible characters.
_PACKED = 72
#: A left-hand side wider than this goes on a line of its own when its line is broken.
_WIDEST_LHS = 30
_BREAK = " \\\\\n&\\quad "


def _width(tex: str) -> int:
    """Visible characters, the words of ``\\text{…}`` with their spaces."""
    return visible_width(re.sub(r"\\text\{([^{}]*)\}", lambda t: t[1].replace(" ", "x"), tex))


def _bracketed(pieces: list[str]) -> list[str]:
    """Pieces of a sum or product that spans lines, in brackets that need not pair per line."""
    return [r"\Bigl(" + pieces[0], *pieces[1:-1], pieces[-1] + r"\Bigr)"]


def _pieces(expr: sp.Expr) -> list[str]:
    """The LaTeX of `expr` in pieces between which a line may break."""
    text = latex(expr)
    if _width(text) <= _PACKED or isinstance(expr, sp.MatrixBase | sp.MatrixExpr):
        return [text]
    if isinstance(expr, sp.Sum) and len(expr.limits) == 1:
        inner = _pieces(expr.function)
        if len(inner) > 1:
            sign = latex(sp.Sum(sp.Symbol("BODY"), expr.limits[0])).replace("BODY", "").strip()
            bracketed = _bracketed(inner)
            return [f"{sign} {bracketed[0]}", *bracketed[1:]]
    if isinstance(expr, sp.Add):
        pieces: list[str] = []
        for index, term in enumerate(ordered_terms(expr)):
            negative = term.could_extract_minus_sign()
            part = _pieces(-term if negative else term)
            sign = "-" if negative else "+" if index else ""
            pieces += [f"{sign} {part[0]}".strip(), *part[1:]]
        return pieces
    if isinstance(expr, sp.Mul):
        coefficient, factors = expr.as_coeff_mul()
        if coefficient == 1 and not any(factor.is_number for factor in factors):
            plain = [latex(f) for f in factors if not isinstance(f, sp.Add)]
            sums = sorted((f for f in factors if isinstance(f, sp.Add)), key=term_key)
            pieces = [" ".join(plain)] if plain else []
            for factor in sums:
                part = _pieces(factor)
                pieces += [rf"\left({part[0]}\right)"] if len(part) == 1 else _bracketed(part)
            return pieces
    return [text]


def _relation(lhs: str, relation: str, rhs: sp.Expr) -> str:
    """``lhs &= rhs``, broken into lines where it is wider than the page."""
    right = latex(rhs)
    if _width(lhs) + _width(right) <= WIDEST_LINE:
        return f"{lhs} &{relation} {right}".lstrip()
    lines = [" ".join(line) for line in packed(_pieces(rhs), _PACKED, _width)]
    if _width(lhs) > _WIDEST_LHS:
        return f"& {lhs} \\\\\n&{relation} " + _BREAK.join(lines)
    return f"{lhs} &{relation} ".lstrip() + _BREAK.join(lines)


def equation(eq: sp.Eq) -> str:
    r"""``lhs &= rhs`` (``&\le`` for an inequality), on several lines where it is too wide."""
    return _relation(latex(eq.lhs), _RELATION[eq.rel_op], eq.rhs)


def chain(equations: tuple[sp.Eq, ...]) -> tuple[str, ...]:
    """Equations as a chain: ``a &= b``, then ``&= c`` while each continues the previous one
    (same left-hand side, or the previous right-hand side); a repeated value is left out."""
    lines: list[str] = []
    lhs: sp.Expr | None = None
    last: sp.Expr | None = None
    for eq in equations:
        if lhs is not None and eq.lhs in (lhs, last):
            if eq.rhs != last:
                lines.append(_relation("", _RELATION[eq.rel_op], eq.rhs))
                last = eq.rhs
            continue
        lines.append(equation(eq))
        lhs, last = eq.lhs, eq.rhs
    return tuple(lines)


def fact_lines(fact: Fact) -> tuple[str, ...]:
    """A fact's derivation as a chain; a fact whose derivation misses its claim is refused
    (a document never states what SymPy did not derive)."""
    if not fact.holds:
        raise RuntimeError(f"fact {fact.name} does not hold: residual {fact.residual}")
    return chain(fact.derivation)


def shape(dims: tuple[sp.Expr, sp.Expr]) -> str:
    """``$n \\times d$``."""
    return rf"${latex(dims[0])} \times {latex(dims[1])}$"
