"""derive.calculus.summation on the forms an independent review drew: brackets whose bounds
read another index, and a sum whose index is named like one the ranges around it read. Each
result equals the expression it simplifies at every point of a grid of concrete sizes."""

import itertools

import sympy as sp

from derive.calculus.summation import simplified
from derive.notation.functions import Indicator

n, m, p, t = (sp.Symbol(x, integer=True, positive=True) for x in "nmpt")
f = sp.Function("f")


def _value(expr: sp.Expr, at: dict) -> sp.Expr:
    """The expression's number at `at`: brackets decided, sums written out."""
    done = expr.subs(at).doit()  # subs: a sum's own index stays bound
    return done.replace(lambda e: isinstance(e, Indicator), lambda e: sp.S(bool(e.args[0])))


def assert_same_values(expr: sp.Expr, ranges: dict, free: tuple) -> None:
    got = simplified(expr, ranges)
    for size in (3, 5):
        for point in itertools.product(range(1, size + 1), repeat=len(free)):
            at = {n: size, **dict(zip(free, point, strict=True))}
            assert sp.simplify(_value(got, at) - _value(expr, at)) == 0, (got, at)


def test_brackets_whose_bounds_read_a_later_index():
    """[p ≤ m − 2][m ≥ 2]: narrowing p by the first reads m, ranged after p (it raised
    AttributeError: 'int' object has no attribute 'coeff')."""
    expr = Indicator(sp.Le(p, m - 2)) * Indicator(sp.Ge(m, 2)) * f(p)
    assert_same_values(expr, {m: (1, n), p: (1, n), t: (1, n)}, (m, p))


def test_a_sum_whose_index_shadows_a_bound_of_the_ranges():
    """Σ_m inside [p ≤ m − 1]: the sum's m is its own, not the m that narrows p (the sum was
    cut to the outer m's range)."""
    inner = sp.Sum(f(m) * Indicator(sp.Le(2 * p, 2 * m - 2)), (m, 1, n))
    expr = Indicator(sp.Le(p, m - 1)) * inner
    assert_same_values(expr, {p: (1, n), m: (1, n)}, (m, p))
