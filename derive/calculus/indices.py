"""Index bookkeeping: the documents' 1-based entries against SymPy's 0-based matrix elements, and
simplification under the declared index ranges.

- `zero_based` turns a declared right-hand side (1-based `Indexed` entries, sums from 1) into the
  form SymPy's matrix machinery reads: entries of `MatrixSymbol`s, sums from 0.
- `element_of` does the reverse for a matrix expression: its entry, in the book's indices, each
  summation index named after the size it runs over (p over n, j over c, i over d).
- `under_ranges` decides what the ranges decide: a condition such as t ≤ n where t runs over
  1 … n, a floor (⌊(ℓ − 1)/h⌋ = 0 for ℓ = 1 … h), a sum of a Kronecker delta
  (Σ_{r=1}^{n} f(r) δ_{r,t} = f(t) when 1 ≤ t ≤ n), a sum whose
  terms vanish past an index (Σ_{r=1}^{n} [r ≤ m] f(r) = Σ_{r=1}^{m} f(r)). No branch is picked by
  hand: each is decided from the ranges, or left as it is.
"""

from __future__ import annotations

from collections.abc import Mapping

import sympy as sp
from sympy import Indexed, KroneckerDelta, MatrixSymbol, Piecewise, Sum
from sympy.matrices.expressions.matexpr import MatrixElement

from ..notation import letters as L

__all__ = [
    "Ranges",
    "zero_based",
    "zero_index",
    "element_of",
    "under_ranges",
    "decide",
    "fresh_index",
    "canonical_sums",
    "readable_sums",
]

Ranges = Mapping[sp.Symbol, tuple[sp.Expr, sp.Expr]]

#: The summation index for a sum over each size, in order of preference.
_PRIMED = {
    name: sp.Symbol(name, integer=True, positive=True) for name in ("j''", "r'", "t'", "i'", "l''")
}
_NAMES = {
    L.n: (L.m, L.p, L.r, L.t, _PRIMED["r'"], _PRIMED["t'"]),
    L.s: (L.p, L.r, L.t, _PRIMED["r'"]),
    L.c: (L.j, L.j2, _PRIMED["j''"]),
    L.c_h: (L.j, L.j2, _PRIMED["j''"]),
    L.d: (L.i, _PRIMED["i'"]),
    L.d_y: (L.i, _PRIMED["i'"]),
    L.h: (L.ell, L.ell2, _PRIMED["l''"]),
}


def _shift_sum(total: Sum, by: int) -> Sum:
    """Σ_{v=lo}^{hi} f(v) as Σ_{v=lo+by}^{hi+by} f(v − by): the same sum, counted from elsewhere."""
    function, limits = total.function, []
    for variable, low, high in total.limits:
        function = function.xreplace({variable: variable - by})
        limits.append((variable, low + by, high + by))
    return Sum(function, *limits)


def zero_based(
    expr: sp.Expr, free: tuple[sp.Symbol, ...], symbols: Mapping[str, MatrixSymbol]
) -> sp.Expr:
    """A 1-based right-hand side as SymPy's matrix machinery reads it.

    Each free index f becomes its 0-based twin `zero_index(f)` (f = zero_index(f) + 1), each sum
    runs from 0, and each entry y_{a,b} becomes the element Y[a − 1, b − 1] of its matrix symbol
    (`symbols`: letter -> `MatrixSymbol`; a head's entry y^{(ℓ)}_{a,b} is an element of ``Y_l``).
    """
    expr = expr.xreplace({index: zero_index(index) + 1 for index in free})
    expr = expr.replace(lambda e: isinstance(e, Sum), lambda e: _shift_sum(e, -1))

    def element(entry: Indexed) -> sp.Expr:
        row, col = entry.indices[-2:]
        return symbols[L.letter_of(entry)][row - 1, col - 1]

    return expr.replace(lambda e: isinstance(e, Indexed), element)


def zero_index(index: sp.Symbol) -> sp.Symbol:
    """The 0-based twin of a 1-based index: the same name, running from 0 (so that SymPy accepts
    it as an index of a matrix with one row)."""
    return sp.Symbol(index.name, integer=True, nonnegative=True)


def fresh_index(size: sp.Expr, taken: set[sp.Symbol]) -> sp.Symbol:
    """A summation index for a sum over `size`, not among `taken` (p, r, t over n; j over c)."""
    for name in _NAMES.get(size, ()):
        if name not in taken:
            return name
    return sp.Dummy("k", integer=True, positive=True)


def _entry(element: MatrixElement) -> Indexed:
    letter = str(element.parent.name)
    base = L.base(L.name_of(letter))
    row, col = element.i + 1, element.j + 1
    return base[L.ell, row, col] if letter.endswith("_l") else base[row, col]


def element_of(expr: sp.MatrixExpr, row: sp.Symbol, col: sp.Symbol) -> sp.Expr:
    """Entry (row, col) of a matrix expression, expanded by SymPy, in the book's indices.

    SymPy writes every sum over a 0-based dummy; each becomes a sum from 1 over an index named
    after the size it runs over (`fresh_index`), and each element Y[a, b] the entry y_{a+1,b+1}.
    """
    expanded = sp.sympify(expr[row - 1, col - 1])
    expanded = _rename_sums(expanded, {row, col})
    return expanded.replace(lambda e: isinstance(e, MatrixElement), _entry)


def _rename_sums(expr: sp.Expr, taken: set[sp.Symbol]) -> sp.Expr:
    """Each sum's 0-based dummy as a 1-based index named for its size, avoiding the indices in
    scope (`taken`: the free ones and those of the enclosing sums; separate terms may share)."""
    if isinstance(expr, Sum):
        function, limits, inner = expr.function, [], set(taken)
        for variable, low, high in expr.limits:
            index = fresh_index(high - low + 1, inner)
            inner.add(index)
            function = function.xreplace({variable: index - 1})
            limits.append((index, low + 1, high + 1))
        return Sum(_rename_sums(function, inner), *limits)
    if not expr.args or not expr.has(Sum):
        return expr
    return expr.func(*[_rename_sums(arg, taken) for arg in expr.args])


# ---------------------------------------------------------------------------------------------
# Deciding conditions from ranges


def _bound(expr: sp.Expr, ranges: Ranges, lowest: bool) -> sp.Expr:
    """The smallest (or largest) value of an expression linear in the indices over their ranges."""
    value = sp.expand(expr)
    for index, (low, high) in ranges.items():
        coefficient = value.coeff(index)
        if coefficient == 0:
            continue
        if coefficient.is_positive:
            value = sp.sympify(value.xreplace({index: low if lowest else high}))
        elif coefficient.is_negative:
            value = sp.sympify(value.xreplace({index: high if lowest else low}))
        else:
            return sp.nan
    return sp.expand(value)


def decide(condition: sp.Basic, ranges: Ranges) -> sp.Basic:
    """True or False where the ranges decide a condition, else the condition as it is."""
    if condition in (sp.true, sp.false):
        return condition
    if isinstance(condition, sp.And | sp.Or):
        parts = [decide(part, ranges) for part in condition.args]
        return type(condition)(*parts)
    if isinstance(condition, sp.Ne):
        return decide(sp.Or(sp.Lt(*condition.args), sp.Gt(*condition.args)), ranges)
    if not isinstance(condition, sp.core.relational.Relational) or isinstance(condition, sp.Eq):
        return condition  # an equation (j mod 2 = 1) is decided by SymPy where it can be
    strict = isinstance(condition, sp.StrictLessThan | sp.StrictGreaterThan)
    small, large = condition.lts, condition.gts  # small ≤ large (or <)
    gap_low = _bound(large - small, ranges, lowest=True)
    gap_high = _bound(large - small, ranges, lowest=False)
    holds = gap_low.is_positive if strict else gap_low.is_nonnegative
    fails = gap_high.is_nonpositive if strict else gap_high.is_negative
    if holds:
        return sp.true
    if fails:
        return sp.false
    return condition


def _piecewise(expr: Piecewise, ranges: Ranges) -> sp.Expr:
    pieces = []
    for value, condition in expr.args:
        decided = decide(condition, ranges)
        if decided == sp.false:
            continue
        pieces.append((value, decided))
        if decided == sp.true:
            break
    if len(pieces) == 1 and pieces[0][1] == sp.true:
        return pieces[0][0]
    return Piecewise(*pieces)


def _delta_term(term: sp.Expr, variable: sp.Symbol) -> tuple[sp.Expr, sp.Expr] | None:
    """(the rest of a term, the value δ fixes `variable` to) when the term has a δ_{variable,e}."""
    for factor in sp.Mul.make_args(term):
        if isinstance(factor, KroneckerDelta) and variable in factor.free_symbols:
            first, second = factor.args
            value = second if first == variable else first
            if variable not in value.free_symbols:
                rest = sp.Mul(*[f for f in sp.Mul.make_args(term) if f is not factor])
                return rest, value
    return None


def _restricted(term: sp.Expr, variable: sp.Symbol) -> tuple[sp.Expr, sp.Basic] | None:
    """(value, condition on `variable`) for a term Piecewise((value, condition), (0, True))."""
    if isinstance(term, Piecewise) and len(term.args) == 2:
        (value, condition), (otherwise, rest) = term.args
        if otherwise == 0 and rest == sp.true and variable in condition.free_symbols:
            return value, condition
    return None


def _sum(total: Sum, ranges: Ranges) -> sp.Expr:
    """One sum, simplified: delta terms summed out, a restricted range cut to its limits.
    Several limits are taken innermost first (SymPy lists them that way)."""
    expr = total.function
    for limit in total.limits:
        expr = _one_limit(expr, limit, ranges)
    return expr


def _one_limit(function: sp.Expr, limit: tuple, ranges: Ranges) -> sp.Expr:
    variable, low, high = limit
    kept, done = [], []
    for term in sp.Add.make_args(sp.expand(function)):
        found = _delta_term(term, variable)
        if found is not None:
            rest, value = found
            condition = decide(sp.And(sp.Le(low, value), sp.Le(value, high)), ranges)
            fixed = rest.xreplace({variable: value})
            done.append(fixed if condition == sp.true else Piecewise((fixed, condition), (0, True)))
            continue
        restricted = _restricted(term, variable)
        if restricted is not None:
            value, condition = restricted
            limits = _limits(condition, variable, low, high, ranges)
            if limits is not None:
                done.append(Sum(value, (variable, *limits)))
                continue
        kept.append(term)
    for term in kept:  # factors free of the variable go in front: Σ_t f g_t = f Σ_t g_t
        factors = sp.Mul.make_args(term)
        outside = sp.Mul(*[f for f in factors if variable not in f.free_symbols])
        inside = sp.Mul(*[f for f in factors if variable in f.free_symbols])
        done.append(outside * Sum(inside, (variable, low, high)))
    return sp.Add(*done)


def _limits(
    condition: sp.Basic, variable: sp.Symbol, low: sp.Expr, high: sp.Expr, ranges: Ranges
) -> tuple[sp.Expr, sp.Expr] | None:
    """New limits for a sum over `variable` whose terms vanish outside `condition` (a
    conjunction of bounds on the variable), or None. A bound the ranges do not show to lie
    within low … high becomes a max or a min (integers: p > e is p ≥ e + 1)."""
    parts = condition.args if isinstance(condition, sp.And) else (condition,)
    for part in parts:
        if not isinstance(part, sp.core.relational.Relational) or part.rel_op not in (
            "<=",
            ">=",
            "<",
            ">",
        ):
            return None
        strict = part.rel_op in ("<", ">")
        small, large = part.lts, part.gts
        if small == variable and variable not in large.free_symbols:
            bound = large - 1 if strict else large
            inside = decide(sp.Le(bound, high), ranges) == sp.true
            high = bound if inside else sp.Min(high, bound)
        elif large == variable and variable not in small.free_symbols:
            bound = small + 1 if strict else small
            inside = decide(sp.Le(low, bound), ranges) == sp.true
            low = bound if inside else sp.Max(low, bound)
        else:
            return None
    return low, high


def _fold(expr: sp.Expr) -> sp.Expr:
    """`sympy.piecewise_fold`, sum by sum: a Piecewise never leaves the sum that binds its
    index (SymPy's own fold would carry a condition on r out of Σ_r)."""
    sums = sorted(expr.atoms(Sum), key=sp.count_ops)
    if not sums:
        return sp.piecewise_fold(expr)
    outermost = [s for s in sums if not any(s != o and o.has(s) for o in sums)]
    holders = {s: sp.Dummy("sum") for s in outermost}
    folded = sp.piecewise_fold(expr.xreplace(holders))
    inner = {h: Sum(_fold(s.function), *s.limits) for s, h in holders.items()}
    return folded.xreplace(inner)


def _extreme(expr: sp.Expr, ranges: Ranges) -> sp.Expr:
    """max(a, b) or min(a, b) where the ranges decide which argument it is."""
    if len(expr.args) != 2:
        return expr
    a, b = expr.args
    a_at_most_b = decide(sp.Le(a, b), ranges)
    b_at_most_a = decide(sp.Le(b, a), ranges)
    if isinstance(expr, sp.Max):
        return b if a_at_most_b == sp.true else a if b_at_most_a == sp.true else expr
    return a if a_at_most_b == sp.true else b if b_at_most_a == sp.true else expr


def _floor(expr: sp.floor, ranges: Ranges) -> sp.Expr:
    """⌊e⌋ where the ranges keep e within [k, k + 1): ⌊(ℓ − 1)/h⌋ = 0 for ℓ = 1 … h."""
    low, high = (_bound(expr.args[0], ranges, lowest=which) for which in (True, False))
    k = sp.floor(low) if low.is_number and low is not sp.nan else None
    # over one denominator, so that the signs decide: 1 − (n − 1)/(n + κ) = (κ + 1)/(n + κ) > 0
    return k if k is not None and sp.together(k + 1 - high).is_positive else expr


def under_ranges(expr: sp.Expr, ranges: Ranges) -> sp.Expr:
    """`expr` with every condition the ranges decide decided (see the module docstring)."""
    for _ in range(4):  # deciding one level can expose the next
        before = expr
        expr = expr.replace(lambda e: isinstance(e, sp.floor), lambda e: _floor(e, ranges))
        expr = expr.replace(lambda e: isinstance(e, Piecewise), lambda e: _piecewise(e, ranges))
        expr = expr.replace(lambda e: isinstance(e, sp.Max | sp.Min), lambda e: _extreme(e, ranges))
        expr = expr.replace(lambda e: isinstance(e, Sum), lambda e: _sum(e, ranges))
        expr = _fold(expr) if expr.has(Piecewise) else expr
        if expr == before:
            break
    return expr


# ---------------------------------------------------------------------------------------------
# Sums equal up to the name of their index


#: The indices of the sums in their canonical form, by nesting depth (one set, so that two sums
#: put in that form with the same function compare equal).
_BOUND = tuple(sp.Dummy(f"k{depth}", integer=True) for depth in range(24))


def canonical_sums(expr: sp.Expr) -> sp.Expr:
    """`expr` with each sum split over its terms, the factors free of its indices in front, and
    its indices renamed by how deep the sum is nested: two sums that differ only in the name of
    their index (Σ_p e^{ω_{m,p}} and Σ_r e^{ω_{m,r}}) become one, so that SymPy cancels a
    quotient of them (the rows of a softmax sum to 1, whatever its scores)."""
    for _ in range(4):  # a factor taken out of a sum is renamed at its new depth next time
        before, expr = expr, _canonical(expr, 0)
        if expr == before:
            break
    return expr


def _canonical(expr: sp.Expr, depth: int) -> sp.Expr:
    if isinstance(expr, Sum):
        function, limits = expr.function, []
        for offset, (variable, low, high) in enumerate(expr.limits):
            index = _BOUND[min(depth + offset, len(_BOUND) - 1)]
            function = function.xreplace({variable: index})
            limits.append((index, _canonical(low, depth), _canonical(high, depth)))
        function = _canonical(function, depth + len(limits))
        indices = {index for index, _, _ in limits}
        terms = []
        for term in sp.Add.make_args(sp.expand_mul(function)):
            factors = sp.Mul.make_args(term)
            outside = [f for f in factors if not f.free_symbols & indices]
            inside = [f for f in factors if f.free_symbols & indices]
            terms.append(
                sp.Mul(*outside)
                * (
                    Sum(sp.Mul(*inside), *limits)
                    if inside
                    else sp.Mul(*[h - lo + 1 for _, lo, h in limits])
                )
            )
        return sp.Add(*terms)
    if not expr.args or not expr.has(Sum):
        return expr
    return expr.func(*[_canonical(arg, depth) for arg in expr.args])


def readable_sums(expr: sp.Expr, taken: frozenset | None = None) -> sp.Expr:
    """`expr` with the indices `canonical_sums` gave its sums named as the book names an index
    over that size (r over n, j' over c), none that is free anywhere in `expr` (the p of
    a_{m,p} = f(p)/Σ_r f(r) is not the sum's) or bound around it."""
    if taken is None:
        taken = frozenset(expr.free_symbols)
    if isinstance(expr, Sum):
        inner, function, limits = set(taken) | expr.free_symbols, expr.function, []
        for variable, low, high in expr.limits:
            index = variable
            if variable in _BOUND:
                index = fresh_index(sp.simplify(high - low + 1), inner | function.free_symbols)
                function = function.xreplace({variable: index})
            inner.add(index)
            limits.append((index, low, high))
        return Sum(readable_sums(function, frozenset(inner)), *limits)
    if not expr.args or not expr.has(Sum):
        return expr
    return expr.func(*[readable_sums(arg, taken) for arg in expr.args])
