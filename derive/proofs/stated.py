"""The claims stated as formulas, in a variant's own words: `Equality` (two expressions in the
entries of the graph) and `Bound` (one no larger than the other), both with the declared
formulas put in and simplified by SymPy; and `per_head`, which reads the entries a claim names
as head ℓ's where the graph has heads."""

from __future__ import annotations

import sympy as sp
from sympy import Eq

from ..calculus import inline
from ..graph import Graph
from ..graph.claims import Bound, Equality
from ..notation import letters as L
from .fact import Fact, chain

__all__ = ["equality", "bound", "per_head"]


def equality(graph: Graph, claim: Equality) -> Fact:
    """lhs = rhs: each side with the formulas of the steps it names put in (and, where the
    difference does not vanish, every step's, down to the graph's inputs; never the entries a
    derivative is taken by), then evaluated (limits, derivatives) and simplified by SymPy."""
    sides = [sp.sympify(side) for side in (claim.lhs, claim.rhs)]
    held = {L.letter_of(v) for side in sides for d in side.atoms(sp.Derivative, sp.Subs)
            for v in d.variables if isinstance(v, sp.Indexed)}  # what is differentiated by, or
    produced = {step.output for step in graph.declarations} - held  # substituted for
    named = {L.letter_of(e) for side in sides for e in side.atoms(sp.Indexed)} & produced
    for letters in (_outermost(graph, named), named, produced):
        lhs, rhs = (inline(sp.sympify(side), graph, letters) for side in (claim.lhs, claim.rhs))
        value, target = sp.simplify(lhs.doit()), sp.simplify(rhs.doit())
        if sp.simplify(value - target) == 0:
            break
    holds = sp.simplify(value - target) == 0
    how = claim.how or "the declared formulas put in, evaluated and simplified by SymPy"
    last = (claim.rhs,) if holds else ()  # which is the claimed side, its formulas put in
    return Fact("equality", claim.title, chain(claim.lhs, lhs, value, *last),
                Eq(claim.lhs, claim.rhs if holds else sp.nan, evaluate=False),
                tuple(sorted(letters)), how)  # fmt: skip


def bound(graph: Graph, claim: Bound) -> Fact:
    """smaller ≤ larger: the difference with the formulas of the steps it names put in, written
    with exponentials and simplified, non-negative by SymPy's assumptions on its symbols."""
    difference = sp.sympify(claim.larger) - sp.sympify(claim.smaller)
    produced = {step.output for step in graph.declarations}
    named = {L.letter_of(e) for e in difference.atoms(sp.Indexed)} & produced
    for letters in (_outermost(graph, named), named):
        put = inline(difference, graph, letters)
        value = sp.simplify(put.doit().rewrite(sp.exp))
        if not value.is_nonnegative:  # a product of signs SymPy knows, where simplify left a sum
            value = sp.factor(value) if sp.factor(value).is_nonnegative else value
        holds = bool(value.is_nonnegative)
        if holds:
            break
    named = letters
    lhs = difference
    statement = sp.Le(claim.smaller, claim.larger, evaluate=False)
    lines = (Eq(lhs, put, evaluate=False), Eq(lhs, value, evaluate=False), statement)
    claimed = statement if holds else sp.Le(claim.smaller, sp.nan, evaluate=False)
    return Fact("bound", claim.title, lines, claimed, tuple(sorted(named)),
                "the declared formulas put into the difference, simplified by SymPy and found "
                "non-negative from what is known of its symbols")  # fmt: skip


def _outermost(graph: Graph, letters: set[str]) -> set[str]:
    """The letters of `letters` that no other of them is computed from (a gated context and the
    context it gates: the gated one), whose formulas a claim puts in first."""
    return {x for x in letters if not any(x in graph.step(y).inputs for y in letters - {x})}


def per_head(expr: sp.Expr, graph: Graph) -> sp.Expr:
    """`expr` with each entry of a matrix that the graph computes per head only (ω̆_{m,p} where
    it has ω̆^{(ℓ)}_{m,p}, in a combination with multi-head attention) as head ℓ's entry, and
    the one entry of a row of one number per head (ALiBi's slope μ_{1,1}, where μ is 1 × h)
    as head ℓ's, μ_{1,ℓ}."""
    produced = {step.output for step in graph.declarations}

    def lifted(entry: sp.Indexed) -> sp.Indexed:
        letter = L.letter_of(entry)
        if len(entry.indices) == 2 and letter not in produced and letter + "_l" in produced:
            return entry.base[(L.ell, *entry.indices)]
        if tuple(entry.indices) == (1, 1) and graph.shapes.get(letter) == (1, L.h):
            return entry.base[1, L.ell]
        return entry

    return sp.sympify(expr).replace(lambda e: isinstance(e, sp.Indexed), lifted)
