"""derive.calculus.matrix_form: from an element-wise formula (0-based sums, as SymPy writes them) to its
matrix form. Sizes are distinct symbols so that a transposed or swapped factor changes a shape."""

import pytest
import sympy as sp
from sympy import MatrixSymbol, OneMatrix, Sum, exp, sqrt

from derive import calculus
from derive.notation import Softmax

n, d, c = sp.symbols("n d c", integer=True, positive=True)
m, p, i, j, r = sp.symbols("m p i j r", integer=True)
X, M, G = MatrixSymbol("X", n, d), MatrixSymbol("M", d, d), MatrixSymbol("G", n, c)
Q, K, W = MatrixSymbol("Q", n, c), MatrixSymbol("K", n, c), MatrixSymbol("W", d, c)
A, B, Z = MatrixSymbol("A", n, n), MatrixSymbol("B", n, n), MatrixSymbol("Z", n, n)


@pytest.mark.parametrize(
    ("element", "indices", "expected"),
    [
        # the dot products of queries and keys: Ω = Q Kᵀ
        (Sum(Q[m, j] * K[p, j], (j, 0, c - 1)), (m, p), Q * K.T),
        # a projection: X W
        (Sum(X[m, i] * W[i, j], (i, 0, d - 1)), (m, j), X * W),
        # a chain with a transpose at the end, written as nested sums: X M Xᵀ
        (Sum(Sum(X[m, i] * M[i, j] * X[p, j], (i, 0, d - 1)), (j, 0, d - 1)), (m, p), X * M * X.T),
        # the same as one sum over two indices
        (Sum(X[m, i] * M[i, j] * X[p, j], (i, 0, d - 1), (j, 0, d - 1)), (m, p), X * M * X.T),
        # a sum over the rows: Xᵀ G (the gradient of a weight)
        (Sum(X[m, i] * G[m, j], (m, 0, n - 1)), (i, j), X.T * G),
        # the indices swapped: the transpose
        (Q[p, m], (m, p), Q.T),
        # a scalar factor stays a scalar
        (Q[m, j] / sqrt(c), (m, j), Q / sqrt(c)),
        (2 * Sum(Q[m, j] * K[p, j], (j, 0, c - 1)), (m, p), 2 * Q * K.T),
    ],
)
def test_contractions_chains_and_transposes(element, indices, expected):
    assert calculus.matrix_form(element, indices) == expected


def test_a_wrong_index_order_gives_another_matrix():
    # Σ_j Q[m,j] K[j,p] would be Q K (shapes permitting): here K[p, j] and K[j, p] differ
    square = MatrixSymbol("S", c, n)
    assert calculus.matrix_form(Sum(Q[m, j] * square[j, p], (j, 0, c - 1)), (m, p)) == Q * square
    assert calculus.matrix_form(Sum(Q[p, j] * K[m, j], (j, 0, c - 1)), (m, p)) == K * Q.T


def test_row_wise_softmax():
    element = exp(Z[m, p]) / Sum(exp(Z[m, r]), (r, 0, n - 1))
    assert calculus.matrix_form(element, (m, p)) == Softmax(Z)
    shifted = exp(Z[m, p] + A[m, p]) / Sum(exp(Z[m, r] + A[m, r]), (r, 0, n - 1))
    assert calculus.matrix_form(shifted, (m, p)) == Softmax(Z + A)


def test_softmax_over_the_wrong_axis_is_no_row_softmax():
    column = exp(Z[m, p]) / Sum(exp(Z[r, p]), (r, 0, n - 1))  # over the queries: not a softmax
    with pytest.raises(calculus.NoMatrixForm):
        calculus.matrix_form(column, (m, p))


def test_hadamard_and_a_row_sum_through_the_ones_matrix():
    element = A[m, p] * (B[m, p] - Sum(A[m, r] * B[m, r], (r, 0, n - 1)))
    form = calculus.matrix_form(element, (m, p))
    expected = sp.HadamardProduct(A, B - sp.HadamardProduct(A, B) * OneMatrix(n, n))
    assert form.doit() == expected.doit()  # the same product, whatever the order of its factors
    # its entry, expanded by SymPy, is the element again
    entry = form[m, p]
    difference = sp.expand(entry.doit() - element.doit())
    assert sp.simplify(difference.subs(n, 3).doit()) == 0


def test_a_block_of_columns_needs_the_shape():
    h, c_h = sp.symbols("h c_h", integer=True, positive=True)
    ell = sp.Symbol("l", integer=True, positive=True)
    element = Q[m, (ell - 1) * c_h + j]
    block = calculus.matrix_form(element, (m, j), shape=(n, c_h))
    assert isinstance(block, sp.MatrixSlice) and block.parent == Q
    (start, stop, step), whole = block.colslice, block.rowslice
    assert (sp.expand(start - (ell - 1) * c_h), sp.expand(stop - ell * c_h), step) == (0, 0, 1)
    assert whole == (0, n, 1)
    with pytest.raises(calculus.NoMatrixForm, match="is not entry"):
        calculus.matrix_form(element, (m, j))


def test_a_formula_with_no_matrix_form_is_refused():
    with pytest.raises(calculus.NoMatrixForm):
        calculus.matrix_form(Q[m, j] / Sum(Q[m, r] ** 3, (r, 0, c - 1)), (m, j))


def test_a_function_of_one_entry_is_taken_entry_by_entry():
    from sympy.matrices.expressions.applyfunc import ElementwiseApplyFunction

    form = calculus.matrix_form(Q[m, j] * sp.cos(G[m, j]), (m, j))
    assert isinstance(form, sp.HadamardProduct) and Q in form.args
    (cosine,) = [f for f in form.args if isinstance(f, ElementwiseApplyFunction)]
    assert cosine.expr == G and cosine.function(sp.Symbol("z")) == sp.cos(sp.Symbol("z"))


def test_rms_normalisation_of_the_rows_and_gains_on_the_columns():
    from derive.notation import Diag, RMSNorm

    eps = sp.Symbol("epsilon", positive=True)
    gains = MatrixSymbol("g", 1, c)
    root = (Sum(Q[m, r] ** 2, (r, 0, c - 1)) / c + eps) ** sp.Rational(-1, 2)
    assert calculus.matrix_form(Q[m, j] * root, (m, j)) == RMSNorm(Q, eps)
    assert calculus.matrix_form(gains[0, j] * Q[m, j] * root, (m, j)) == RMSNorm(Q, eps) * Diag(
        gains
    )
    over_columns = (Sum(Q[r, j] ** 2, (r, 0, n - 1)) / n + eps) ** sp.Rational(-1, 2)
    with pytest.raises(calculus.NoMatrixForm):  # a column's statistic: not a row normalisation
        calculus.matrix_form(Q[m, j] * over_columns, (m, j))


def test_sums_over_part_of_a_row_are_no_softmax_and_no_rms_norm():
    """A head's block of a row (its range read from the column) or a fixed part of it is not
    the whole row's statistic; up to the row's own index (the keys a cache has seen) the
    softmax is the row's, as the kv-cache variant declares it."""
    eps = sp.Symbol("epsilon", positive=True)
    w = sp.Symbol("w", integer=True, positive=True)
    start = w * sp.floor(j / w)
    per_head = (Sum(Q[m, r] ** 2, (r, start, start + w - 1)) / w + eps) ** sp.Rational(-1, 2)
    with pytest.raises(calculus.NoMatrixForm):
        calculus.matrix_form(Q[m, j] * per_head, (m, j))
    for high in (n - 2, m):
        element = exp(Z[m, p]) / Sum(exp(Z[m, r]), (r, 0, high))
        if high == m:
            assert calculus.matrix_form(element, (m, p)) == Softmax(Z)
        else:
            with pytest.raises(calculus.NoMatrixForm):
                calculus.matrix_form(element, (m, p))


def test_a_block_offset_by_a_group_is_a_block_of_columns():
    g, h, ell = sp.symbols("g h l", integer=True, positive=True)
    offset = sp.floor((ell - 1) * g / h) * 2
    form = calculus.matrix_form(K[m, offset + j], (m, j), shape=(n, 2))
    assert isinstance(form, sp.MatrixSlice) and form.parent == K
    assert form.colslice[0] == offset
