r"""Sums of the chain rule, simplified by what the index ranges decide, and nothing else.

Differentiating one entry of a step by one entry of what it reads leaves Kronecker deltas
(∂x_{ℓ,i}/∂x_{t,k} = δ_{ℓ,t} δ_{i,k}) and Iverson brackets (a condition on indices, written
[P], from a declared ``Piecewise``) inside sums. `simplified` removes them as a reader would:

- Σ_{v=lo}^{hi} δ_{v+e, f} g(v) = [lo ≤ f − e ≤ hi] g(f − e): a delta whose two sides differ by
  v plus or minus what is free of v fixes v (a shifted column, j + c/2, included);
- Σ_{v=lo}^{hi} [a ≤ v ≤ b] g(v) = [max(lo, a) ≤ min(hi, b)] Σ_{v=max(lo,a)}^{min(hi,b)} g(v),
  the max and the min decided by the ranges of the indices around (where they are not, the
  bracket stays inside the sum: nothing is guessed);
- a bracket or a delta the ranges decide is 1 or 0 (`derive.calculus.indices.decide`);
- factors free of a sum's index go in front of it.

Each sum's index is a `sympy.Dummy` while this runs (`bound_apart`), so no index is captured by
another of the same name (a user's ℓ is not the head's ℓ; a sum over p inside the gradient of
an entry (m, p) is not the entry's p); `readable` names them back, as the book would.
"""

from __future__ import annotations

import sympy as sp
from sympy import KroneckerDelta, Product, Sum

from ..notation.functions import Indicator
from .indices import Ranges, decide

__all__ = ["simplified", "bound_apart", "readable", "bracket"]


def _non_strict(part: sp.Basic) -> sp.Basic:
    """A strict bound between integers as the non-strict one it is (p < m is p ≤ m − 1), so
    that one condition written two ways is one bracket."""
    if not isinstance(part, sp.StrictLessThan | sp.StrictGreaterThan):
        return part
    small, large = part.lts, part.gts
    if not all(s.is_integer for s in (small, large)):
        return part
    return sp.Le(small, large - 1)


def bracket(condition: sp.Basic, ranges: Ranges) -> sp.Expr:
    """[condition], decided where the ranges decide it (1 or 0), each part of a conjunction
    decided on its own (the parts that always hold dropped), strict bounds between integers
    written non-strict."""
    parts = sp.And.make_args(condition)
    kept = []
    for part in parts:
        decided = decide(part, ranges)
        if decided is sp.false:
            return sp.S.Zero
        if decided is not sp.true:
            kept.append(_non_strict(part))
    return Indicator(sp.And(*kept)) if kept else sp.S.One


def _under_brackets(ranges: Ranges, brackets: list[sp.Expr]) -> dict:
    """The ranges narrowed by what the brackets of a product say of its indices ([p ≤ m − 1]
    puts p in 1 … m − 1): the other factors are read where the brackets hold, and are 0
    elsewhere anyway."""
    narrowed = dict(ranges)
    for factor in brackets:
        for part in sp.And.make_args(factor.args[0]):
            for variable in part.free_symbols & set(narrowed):
                bound = _bound_of(part, variable)
                if bound is None:
                    continue
                side, value = bound
                low, high = narrowed[variable]
                chosen = _tighter(low if side == "low" else high, value, side, narrowed)
                if chosen is not None:
                    narrowed[variable] = (chosen, high) if side == "low" else (low, chosen)
    return narrowed


def _product(expr: sp.Mul, ranges: Ranges) -> sp.Expr:
    """A product whose brackets narrow the ranges its other factors are simplified under;
    each bracket is simplified under the others' narrowing, so that one implied by another
    (or the same written twice) is 1."""
    factors = [simplified(f, ranges) for f in expr.args]
    brackets = [f for f in factors if isinstance(f, Indicator)]
    if not brackets:
        return sp.Mul(*factors)
    others = [f for f in factors if not isinstance(f, Indicator)]
    kept: list[sp.Expr] = []
    for k, factor in enumerate(brackets):
        around = _under_brackets(ranges, kept + brackets[k + 1 :])
        decided = bracket(factor.args[0], around)
        if decided == 0:
            return sp.S.Zero
        if decided != 1:
            kept.append(decided)
    narrowed = _under_brackets(ranges, kept)
    return sp.Mul(*kept, *[simplified(f, narrowed) for f in others])


def _solve(difference: sp.Expr, variable: sp.Symbol) -> sp.Expr | None:
    """v where `difference` (linear in v, coefficient ±1) is 0; None otherwise."""
    expanded = sp.expand(difference)
    coefficient = expanded.coeff(variable)
    if coefficient not in (1, -1) or variable in (expanded - coefficient * variable).free_symbols:
        return None
    return sp.expand(-(expanded - coefficient * variable) / coefficient)


def _bound_of(part: sp.Basic, variable: sp.Symbol) -> tuple[str, sp.Expr] | None:
    """("low" | "high", bound) for a bound on `variable` (an integer: v > e is v ≥ e + 1), or
    None where `part` is not one (coefficient ±1)."""
    if not isinstance(part, sp.core.relational.Relational) or part.rel_op not in (
        "<=",
        "<",
        ">=",
        ">",
    ):
        return None
    strict = part.rel_op in ("<", ">")
    small, large = part.lts, part.gts  # small ≤ large (or <)
    gap = sp.expand(large - small)
    coefficient = gap.coeff(variable)
    rest = sp.expand(gap - coefficient * variable)
    if coefficient not in (1, -1) or variable in rest.free_symbols:
        return None
    # coefficient · v + rest ≥ 0 (or > 0)
    if coefficient == 1:  # v ≥ −rest
        return "low", -rest + 1 if strict else -rest
    return "high", rest - 1 if strict else rest  # v ≤ rest


def _tighter(old: sp.Expr, new: sp.Expr, side: str, ranges: Ranges) -> sp.Expr | None:
    """The tighter of two bounds where the ranges decide which it is, else None."""
    if side == "low":
        if decide(sp.Le(new, old), ranges) is sp.true:
            return old
        if decide(sp.Le(old, new), ranges) is sp.true:
            return new
    else:
        if decide(sp.Le(old, new), ranges) is sp.true:
            return old
        if decide(sp.Le(new, old), ranges) is sp.true:
            return new
    return None


def _one_term(term: sp.Expr, limit: tuple, ranges: Ranges) -> sp.Expr:
    """Σ_{v=lo}^{hi} of one product of factors."""
    variable, low, high = limit
    factors = list(sp.Mul.make_args(term))
    for k, factor in enumerate(factors):
        if isinstance(factor, KroneckerDelta) and variable in factor.free_symbols:
            value = _solve(factor.args[0] - factor.args[1], variable)
            if value is None:
                continue
            rest = sp.Mul(*(factors[:k] + factors[k + 1 :])).xreplace({variable: value})
            inside = bracket(sp.And(sp.Le(low, value), sp.Le(value, high)), ranges)
            return simplified(inside * rest, ranges)
    kept: list[sp.Expr] = []
    for factor in factors:
        if not (isinstance(factor, Indicator) and variable in factor.free_symbols):
            kept.append(factor)
            continue
        inside_parts = []
        for part in sp.And.make_args(factor.args[0]):
            if variable not in part.free_symbols:
                kept.append(Indicator(part))  # free of v: in front of the sum
                continue
            bound = _bound_of(part, variable)
            side, chosen = ("", None) if bound is None else (bound[0], None)
            if bound is not None:
                chosen = _tighter(low if side == "low" else high, bound[1], side, ranges)
            if chosen is None:
                inside_parts.append(part)
            elif side == "low":
                low = chosen
            else:
                high = chosen
        if inside_parts:
            kept.append(Indicator(sp.And(*inside_parts)))
    outside = sp.Mul(*[f for f in kept if variable not in f.free_symbols])
    inside = sp.Mul(*[f for f in kept if variable in f.free_symbols])
    # limits cut here: a sum over lo … hi is 0 where hi = lo − 1 by any convention; where hi
    # may fall lower, the bracket says it is empty (SymPy's Sum would count it negatively)
    cut = (low, high) != tuple(limit[1:])
    empty = (
        sp.S.One
        if not cut or decide(sp.Le(low, high + 1), ranges) is sp.true
        else bracket(sp.Le(low, high), ranges)
    )
    if empty == 0:
        return sp.S.Zero
    if inside == 1:
        return empty * outside * sp.expand(high - low + 1)
    return empty * outside * Sum(inside, (variable, low, high))


def _over(function: sp.Expr, limit: tuple, ranges: Ranges) -> sp.Expr:
    variable, low, high = limit
    inner = dict(ranges) | {variable: (low, high)}
    terms = sp.Add.make_args(sp.expand_mul(simplified(function, inner)))
    return _merged(sp.Add(*[_one_term(term, limit, ranges) for term in terms]))


def _merged(total: sp.Expr) -> sp.Expr:
    """Sums over the same limits, with the same factors in front up to a number, written as
    one sum with what their terms share factored out: Σ_m x f f̄ − Σ_m x f² f̄ is
    Σ_m x f f̄ (1 − f), as a reader writes it. A sum alone is left as it is."""
    groups: dict = {}
    rest = []
    for term in sp.Add.make_args(total):
        sums = [f for f in sp.Mul.make_args(term) if isinstance(f, Sum)]
        if len(sums) != 1:
            rest.append(term)
            continue
        (found,) = sums
        number, outside = (term / found).as_coeff_Mul()  # −Σ … joins Σ …
        groups.setdefault((found.limits, outside), []).append((term, number * found.function))
    merged = [
        outside * Sum(sp.factor_terms(sp.Add(*(f for _, f in members))), *limits)
        if len(members) > 1
        else members[0][0]
        for (limits, outside), members in groups.items()
    ]
    return sp.Add(*rest, *merged)


def _shadows(total: Sum | Product, ranges: Ranges) -> bool:
    """True where the sum's own index is named like an index of the ranges around it, or one
    their bounds read (Σ_m inside [p ≤ m − 1]): it is renamed while it is simplified."""
    read = set(ranges).union(
        *(sp.sympify(bound).free_symbols for span in ranges.values() for bound in span)
    )
    return any(v in read for v, _, _ in total.limits)


def simplified(expr: sp.Expr, ranges: Ranges) -> sp.Expr:
    """`expr` with its sums, deltas and brackets simplified (see the module docstring)."""
    if isinstance(expr, Sum | Product) and _shadows(expr, ranges):
        fresh = {v: sp.Dummy(v.name, integer=True) for v, _, _ in expr.limits}
        back = {dummy: v for v, dummy in fresh.items()}
        return simplified(expr.xreplace(fresh), ranges).xreplace(back)
    if isinstance(expr, Sum):
        limits = list(expr.limits)  # innermost first
        inner = dict(ranges) | {v: (lo, hi) for v, lo, hi in limits}
        result = simplified(expr.function, inner)
        for k, limit in enumerate(limits):
            outer = dict(ranges) | {v: (lo, hi) for v, lo, hi in limits[k + 1 :]}
            result = _over(result, limit, outer)
        return result
    if isinstance(expr, Indicator):
        return bracket(expr.args[0], ranges)
    if isinstance(expr, KroneckerDelta):
        first, second = expr.args
        if decide(sp.Eq(first, second), ranges) is sp.true or sp.expand(first - second) == 0:
            return sp.S.One
        if decide(sp.Ne(first, second), ranges) is sp.true:
            return sp.S.Zero
        return expr
    if isinstance(expr, Product):
        variable, low, high = expr.limits[0]
        inner = dict(ranges) | {variable: (low, high)}
        return Product(simplified(expr.function, inner), *expr.limits)
    if not expr.args or not expr.has(Sum, Indicator, KroneckerDelta, Product):
        return expr
    if isinstance(expr, sp.Mul):
        return _product(expr, ranges)
    return expr.func(*[simplified(arg, ranges) for arg in expr.args])


# ---------------------------------------------------------------------------------------------
# Bound indices kept apart while deriving, named back after


def bound_apart(expr: sp.Expr) -> tuple[sp.Expr, dict[sp.Dummy, sp.Symbol]]:
    """`expr` with the index of every sum and product a fresh `Dummy` (same assumptions), and
    the map back to the names declared."""
    names: dict[sp.Dummy, sp.Symbol] = {}

    def fresh(node: sp.Expr) -> sp.Expr:
        function, limits = node.function, []
        for variable, low, high in node.limits:
            dummy = sp.Dummy(variable.name, integer=True)
            names[dummy] = variable
            function = function.xreplace({variable: dummy})
            limits.append((dummy, low, high))
        return type(node)(function, *limits)

    found = expr.replace(lambda e: isinstance(e, Sum | Product), fresh)
    return found, names


def readable(expr: sp.Expr, names: dict, taken: set, name_for) -> sp.Expr:
    """Each `Dummy` index named back: its declared name where no index in scope has it (the
    free ones, `taken`, and those of the enclosing sums), else `name_for(size, in scope)`."""
    if isinstance(expr, Sum | Product):
        function, limits, scope = expr.function, [], set(taken)
        for variable, low, high in expr.limits:
            low = readable(low, names, scope, name_for)
            high = readable(high, names, scope, name_for)
            index = variable
            if isinstance(variable, sp.Dummy):
                declared = names.get(variable)
                inner = scope | (function.free_symbols - {variable})
                if declared is not None and declared not in inner:
                    index = declared
                else:
                    index = name_for(sp.simplify(high - low + 1), inner, declared)
                function = function.xreplace({variable: index})
            scope.add(index)
            limits.append((index, low, high))
        return type(expr)(readable(function, names, scope, name_for), *limits)
    if not expr.args or not expr.has(sp.Dummy):
        return expr
    return expr.func(*[readable(arg, names, taken, name_for) for arg in expr.args])
