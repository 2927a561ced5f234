"""A fact: a claim about a graph, and the chain of equations by which SymPy derives it."""

from __future__ import annotations

from dataclasses import dataclass

import sympy as sp

__all__ = ["Fact", "chain"]


def chain(lhs: sp.Expr, *values: sp.Expr) -> tuple[sp.Eq, ...]:
    """lhs = v_1 = v_2 = …, each step once: a value equal to the one before is left out."""
    equations: list[sp.Eq] = []
    for value in values:
        if equations and equations[-1].rhs == value:
            continue
        equations.append(sp.Eq(lhs, value, evaluate=False))
    return tuple(equations)


@dataclass(frozen=True)
class Fact:
    """A claim and its derivation.

    Attributes:
        name: a key (``"rows_sum_to_one"``).
        title: a few words for documents (no formula).
        derivation: equations in order; each continues the one before (its left-hand side is
            the previous one's, or the previous right-hand side), each step done by SymPy.
        claim: what the fact says (Σ_p a_{m,p} = 1); `holds` when the derivation reaches it.
        sources: the outputs of the declarations the derivation reads (for provenance).
        how: a few words on how SymPy derived it.
        stated: the claim as it was stated (lhs = rhs, smaller ≤ larger), for a fact that does
            not hold: what a document marks unproved, and a message names.
        counterexample: where the claim does not hold, values at which it is false, each
            (what, value) as text (``("n", "3")``, ``("x_{1,1}", "-0.5")``, ``("lhs", "0.25")``);
            empty where none was found (SymPy could not prove it, which does not make it false).
    """

    name: str
    title: str
    derivation: tuple[sp.Eq, ...]
    claim: sp.Eq
    sources: tuple[str, ...]
    how: str
    stated: sp.Basic | None = None
    counterexample: tuple[tuple[str, str], ...] = ()

    @property
    def verdict(self) -> str:
        """``"proved"``, ``"false"`` (a counter-example was found) or ``"unproved"`` (SymPy
        could not prove it, and no counter-example was found)."""
        if self.holds:
            return "proved"
        return "false" if self.counterexample else "unproved"

    @property
    def statement(self) -> sp.Eq:
        """The first left-hand side equals the last right-hand side; for a bound, the claim."""
        if not all(isinstance(line, sp.Eq) for line in self.derivation):
            return self.claim
        return sp.Eq(self.derivation[0].lhs, self.derivation[-1].rhs, evaluate=False)

    @property
    def residual(self) -> sp.Expr:
        """The derived value minus the claimed one, simplified (0 when the fact holds)."""
        if self.claim.rhs is sp.nan:  # the derivation did not reach what was claimed
            return sp.nan
        if not isinstance(self.claim.rhs, sp.Expr):  # a condition: reached, or not
            return sp.S.Zero if self.derivation[-1].rhs == self.claim.rhs else sp.nan
        return sp.simplify(sp.expand(self.derivation[-1].rhs - self.claim.rhs))

    @property
    def holds(self) -> bool:
        """True when the derivation reaches the claim exactly (a matrix claim: to the zero
        matrix)."""
        residual = self.residual
        return residual == 0 or isinstance(residual, sp.ZeroMatrix)

    def _repr_latex_(self) -> str:
        from ..notation import latex

        return "$$" + latex(self.statement) + "$$"
