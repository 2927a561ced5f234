"""The claims stated as formulas, in a variant's own words: `Equality` (two expressions in the
entries of the graph) and `Bound` (one no larger than the other), both with the declared
formulas put in and simplified by SymPy; and `per_head`, which reads the entries a claim names
as head ℓ's where the graph has heads."""

from __future__ import annotations

import sympy as sp
from sympy import Eq

from ..calculus import canonical_sums, inline, readable_sums
from ..calculus.indices import under_ranges
from ..graph import Graph
from ..graph.claims import Bound, Equality
from ..notation import letters as L
from .fact import Fact, chain
from .refute import counterexample

__all__ = ["equality", "bound", "per_head"]

#: The ranges of the book's free indices in a claim (a token m, p over n; a feature i over d, j
#: over c): what decides a declared ``Piecewise`` inside a sum (Σ_{p=1}^{m} of a causal rule's
#: [p ≤ m] branch is its first branch's sum).
_RANGES = {
    index: (sp.S.One, size)
    for index, size in ((L.m, L.n), (L.p, L.n), (L.r, L.n), (L.t, L.n), (L.i, L.d), (L.j, L.c))
}


def _simplified(expr: sp.Expr) -> sp.Expr:
    """`sympy.simplify`, or, where SymPy's simplification fails on the expression (its
    sum_combine raises StopIteration on some sums of sums), what cancelling gives."""
    try:
        return sp.simplify(expr)
    except Exception:  # noqa: BLE001 - SymPy's own failure: a weaker simplification instead
        try:
            return sp.cancel(sp.expand(expr))
        except Exception:  # noqa: BLE001
            return expr


def _vanishes(difference: sp.Expr) -> bool:
    """True where SymPy shows the difference to be 0: simplified, and again with each sum put in
    its canonical form (sums equal up to the name of their index cancel)."""
    canonical = canonical_sums(difference)
    if canonical == 0:
        return True
    simplified = _simplified(canonical)
    return simplified == 0 or _simplified(canonical_sums(simplified)) == 0


def _evaluated(side: sp.Expr) -> sp.Expr:
    """A side with its limits and derivatives evaluated and its sums in their canonical form
    (a quotient of equal sums cancelled), simplified where that is cheap: what a document
    shows between the claim and its value."""
    value = readable_sums(canonical_sums(side.doit()))
    if sp.count_ops(value) > 80:  # SymPy's simplify grows fast with the expression
        return value
    simplified = readable_sums(_simplified(canonical_sums(value)))
    return simplified if sp.count_ops(simplified) < sp.count_ops(value) else value


def _inputs(expr: sp.Expr, graph: Graph) -> sp.Expr:
    """`expr` written in the graph's inputs: every entry of a step replaced by its formula."""
    return inline(sp.sympify(expr), graph, {step.output for step in graph.declarations})


def equality(graph: Graph, claim: Equality) -> Fact:
    """lhs = rhs: each side with the formulas of the steps it names put in (and, where the
    difference does not vanish, every step's, down to the graph's inputs; never the entries a
    derivative is taken by), then evaluated (limits, derivatives) and simplified by SymPy. Where
    SymPy cannot show it, both sides written in the inputs are tried at numbers
    (`derive.proofs.refute`): a counter-example makes the fact false, none leaves it unproved."""
    sides = [sp.sympify(side) for side in (claim.lhs, claim.rhs)]
    held = {
        L.letter_of(v)
        for side in sides
        for d in side.atoms(sp.Derivative, sp.Subs)
        for v in d.variables
        if isinstance(v, sp.Indexed)
    }  # what is differentiated by, or
    produced = {step.output for step in graph.declarations} - held  # substituted for
    named = {L.letter_of(e) for side in sides for e in side.atoms(sp.Indexed)} & produced
    holds, letters, lhs = False, set(), sp.S.Zero  # _levels gives at least one level
    for letters in _levels(graph, named, produced):
        lhs, rhs = (
            under_ranges(inline(sp.sympify(side), graph, letters), _RANGES)
            for side in (claim.lhs, claim.rhs)
        )
        holds = _vanishes(lhs.doit() - rhs.doit())
        if holds:
            break
    value = _evaluated(lhs)  # what the document shows, once
    how = claim.how or "the declared formulas put in, evaluated and simplified by SymPy"
    stated = Eq(claim.lhs, claim.rhs, evaluate=False)
    found = (
        ()
        if holds
        else counterexample(*(_inputs(x, graph) for x in (claim.lhs, claim.rhs)), equal=True)
    )
    last = (claim.rhs,) if holds else ()  # which is the claimed side, its formulas put in
    return Fact(
        "equality",
        claim.title,
        chain(claim.lhs, lhs, value, *last),
        Eq(claim.lhs, claim.rhs if holds else sp.nan, evaluate=False),
        tuple(sorted(letters)),
        how,
        stated,
        found,
    )


def _nonnegative(value: sp.Expr) -> bool:
    """True where SymPy's assumptions show `value` ≥ 0: as it is, factored, or a Piecewise whose
    every branch is. A branch holds where its condition does and every earlier condition fails,
    so it is read under any one of these (a clamp's middle branch, ω ≤ γ after ω < −γ, is
    read under ω ≤ γ for the upper bound and under ω ≥ −γ for the lower)."""
    if value.is_nonnegative:
        return True
    if sp.factor(value).is_nonnegative:  # a product of signs SymPy knows
        return True
    if isinstance(value, sp.Piecewise):
        return all(
            any(_nonnegative(_under(branch, known)) for known in _holding(value.args, i))
            for i, (branch, _) in enumerate(value.args)
        )
    folded = sp.piecewise_fold(value)
    return isinstance(folded, sp.Piecewise) and folded != value and _nonnegative(folded)


def _holding(branches: tuple, i: int) -> list[sp.Basic]:
    """What is known where branch i of a Piecewise is taken: nothing more, its own condition, or
    the negation of a condition before it."""
    return [sp.true, branches[i][1], *(sp.Not(condition) for _, condition in branches[:i])]


def _under(expr: sp.Expr, condition: sp.Basic) -> sp.Expr:
    """`expr` where `condition` holds: for a condition e > 0 (or e ≥ 0, or e < 0 …) on one
    entry or symbol e, e replaced by a symbol of that sign."""
    if condition is sp.true or not isinstance(condition, sp.core.relational.Relational):
        return expr
    if isinstance(condition, sp.Eq | sp.Ne):
        return expr
    small, large = condition.lts, condition.gts  # small ≤ large (or <)
    strict = isinstance(condition, sp.StrictLessThan | sp.StrictGreaterThan)
    gap = sp.Dummy("gap", positive=True) if strict else sp.Dummy("gap", nonnegative=True)
    for target, value in ((large, small + gap), (small, large - gap)):
        if isinstance(target, sp.Indexed | sp.Symbol) and not (large - small).has(gap):
            others = (small if target == large else large).free_symbols
            if target not in others:
                return expr.xreplace({target: value})
    return expr


def bound(graph: Graph, claim: Bound) -> Fact:
    """smaller ≤ larger: the difference with the formulas of the steps it names put in, written
    with exponentials and simplified, non-negative by SymPy's assumptions on its symbols (a
    Piecewise branch by branch). Where SymPy cannot show it, it is tried at numbers, as
    `equality` is."""
    difference = sp.sympify(claim.larger) - sp.sympify(claim.smaller)
    produced = {step.output for step in graph.declarations}
    named = {L.letter_of(e) for e in difference.atoms(sp.Indexed)} & produced
    holds = False
    for letters in (_outermost(graph, named), named):
        put = inline(difference, graph, letters)
        value = readable_sums(_simplified(canonical_sums(put.doit().rewrite(sp.exp))))
        holds = _nonnegative(value)
        if holds:
            break
    named = letters
    lhs = difference
    statement = sp.Le(claim.smaller, claim.larger, evaluate=False)
    lines = (Eq(lhs, put, evaluate=False), Eq(lhs, value, evaluate=False), statement)
    claimed = statement if holds else sp.Le(claim.smaller, sp.nan, evaluate=False)
    found = (
        ()
        if holds
        else counterexample(
            *(_inputs(x, graph) for x in (claim.smaller, claim.larger)), equal=False
        )
    )
    return Fact(
        "bound",
        claim.title,
        lines,
        claimed,
        tuple(sorted(named)),
        "the declared formulas put into the difference, simplified by SymPy and found "
        "non-negative from what is known of its symbols",
        statement,
        found,
    )


def _levels(graph: Graph, named: set[str], produced: set[str]) -> list[set[str]]:
    """The letters whose formulas a claim puts in, a level at a time: the outermost of those
    it names, all it names, then each time the steps those read, down to the graph's inputs (a
    proof shows the shallowest that SymPy completes)."""
    levels = [_outermost(graph, named), set(named)]
    while levels[-1] != produced:
        reads = {x for letter in levels[-1] for x in graph.step(letter).inputs} & produced
        grown = levels[-1] | reads
        levels.append(grown if grown != levels[-1] else set(produced))
    return [level for k, level in enumerate(levels) if level not in levels[:k]]


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
