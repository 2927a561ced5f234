"""Index bookkeeping: 1-based declarations against SymPy's 0-based elements, and what the
declared index ranges decide (conditions, Kronecker deltas, restricted sums)."""

import sympy as sp
from sympy import KroneckerDelta, Piecewise, Sum, exp

from derive.calculus import element_of, under_ranges, zero_based
from derive.calculus.indices import decide, zero_index
from derive.notation import letters as L

n, c = L.n, L.c
m, p, r, t, j = L.m, L.p, L.r, L.t, L.j
RANGES = {m: (1, n), p: (1, n), t: (1, n)}
w = L.base("omegatilde")


def test_zero_based_shifts_free_and_summed_indices():
    q, k = L.base("q"), L.base("k")
    Q, K = sp.MatrixSymbol("Q", n, c), sp.MatrixSymbol("K", n, c)
    one_based = Sum(q[m, j] * k[p, j], (j, 1, c))
    m0, p0 = zero_index(m), zero_index(p)  # the same names, counted from 0
    assert zero_based(one_based, (m, p), {"Q": Q, "K": K}) == Sum(
        Q[m0, j] * K[p0, j], (j, 0, c - 1)
    )
    assert (m0.name, m0.is_nonnegative, m0 == m) == ("m", True, False)


def test_element_of_names_each_sum_by_its_size_and_counts_from_one():
    A, V = sp.MatrixSymbol("A", n, n), sp.MatrixSymbol("V", n, c)
    entry = element_of(A.T * V, p, j)  # the gradient of V has a sum over the queries
    assert entry == Sum(L.base("a")[m, p] * L.base("v")[m, j], (m, 1, n))
    # separate terms may reuse an index; nested sums may not
    X, W1, W2 = (
        sp.MatrixSymbol("X", n, c),
        sp.MatrixSymbol("W_q", c, c),
        sp.MatrixSymbol("W_k", c, c),
    )
    both = element_of(X * W1 + X * W2, m, L.i)
    assert {tuple(s.variables) for s in both.atoms(Sum)} == {(L.j,)}  # j in each term


def test_conditions_decided_by_the_ranges():
    assert decide(sp.Le(t, n), RANGES) == sp.true  # t runs over 1 … n
    assert decide(sp.Ge(t, 1), RANGES) == sp.true
    assert decide(sp.Gt(t, n), RANGES) == sp.false
    assert decide(sp.Le(p, m), RANGES) == sp.Le(p, m)  # depends on p and m: left as it is


def test_a_kronecker_delta_is_summed_out_only_inside_its_range():
    inside = under_ranges(Sum(exp(w[m, r]) * KroneckerDelta(r, t), (r, 1, n)), RANGES)
    assert inside == exp(w[m, t])
    # r runs over 1 … m: t may lie beyond it, and the condition stays
    partial = under_ranges(Sum(exp(w[m, r]) * KroneckerDelta(r, t), (r, 1, m)), RANGES)
    assert isinstance(partial, Piecewise) and partial.args[0][0] == exp(w[m, t])


def test_a_sum_of_terms_that_vanish_past_an_index_stops_there():
    restricted = Sum(Piecewise((exp(w[m, r]), sp.Le(r, m)), (0, True)), (r, 1, n))
    assert under_ranges(restricted, RANGES) == Sum(exp(w[m, r]), (r, 1, m))


def test_a_condition_never_leaves_the_sum_that_binds_its_index():
    mask = Piecewise((0, sp.Le(r, m)), (-sp.oo, True))
    total = Sum(exp(w[m, r] + mask), (r, 1, n))
    simplified = under_ranges(exp(w[m, p]) / total, RANGES)
    assert simplified == exp(w[m, p]) / Sum(exp(w[m, r]), (r, 1, m))
