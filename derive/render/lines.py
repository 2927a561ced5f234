"""Aligned lines from SymPy equations: one equation, or a chain ``a &= b``, ``&= c`` …"""

from __future__ import annotations

import sympy as sp

from ..notation import latex
from ..proofs import Fact

__all__ = ["equation", "chain", "fact_lines", "shape"]


_RELATION = {"==": "=", "<=": r"\le", "<": "<", ">=": r"\ge", ">": ">"}


def equation(eq: sp.Eq) -> str:
    r"""``lhs &= rhs`` (``&\le`` for an inequality)."""
    return f"{latex(eq.lhs)} &{_RELATION[eq.rel_op]} {latex(eq.rhs)}"


def chain(equations: tuple[sp.Eq, ...]) -> tuple[str, ...]:
    """Equations as a chain: ``a &= b``, then ``&= c`` while each continues the previous one
    (same left-hand side, or the previous right-hand side); a repeated value is left out."""
    lines: list[str] = []
    lhs: sp.Expr | None = None
    last: sp.Expr | None = None
    for eq in equations:
        if lhs is not None and eq.lhs in (lhs, last):
            if eq.rhs != last:
                lines.append(f"&{_RELATION[eq.rel_op]} {latex(eq.rhs)}")
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
