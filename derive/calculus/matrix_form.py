r"""From an element-wise formula to its matrix form: ω_{m,p} = Σ_j q_{m,j} k_{p,j} gives Ω = Q Kᵀ.

`matrix_form(element, (row, col))` reads an expression in elements of `MatrixSymbol`s (0-based
sums, as SymPy writes them) with two free indices and returns the matrix expression whose entry
(row, col) it is. Contractions (chains and transposes: Σ_i Σ_j X[m,i] M[i,j] X[p,j] → X M Xᵀ,
Σ_m X[m,i] G[m,j] → Xᵀ G) go through SymPy's own converters (`convert_indexed_to_array`, then
`convert_array_to_matrix`). Around them, the rules SymPy lacks:

- a sum of terms is the sum of their matrices; a factor free of the indices is a scalar, an
  entry at fixed indices too (ALiBi's slope μ[0, ℓ] times the distances: μ_{1,ℓ} Δ);
- a product of factors that share both indices is a Hadamard product (A ∘ B), a positive
  integer power of such a factor a Hadamard power (A^{∘2});
- a factor that depends on the row alone and sums over an index as long as a row is a product
  with the all-ones matrix: Σ_r F[m,r] = (F J)[m,p];
- Σ_k F[m,k] G[k,p] where F or G is itself element-wise is the product of their matrices;
- exp(z[m,p]) / Σ_r exp(z[m,r]) is the row-wise softmax of Z, and with exp(ζ) + Σ_r exp(z[m,r])
  (ζ a number, an attention sink's logit) the softmax of Z with that sink;
- a function of one entry (cos φ[m,p]) is that function applied entry by entry (cos Φ), and a
  term free of the indices in a sum is a multiple of the all-ones matrix (σ(Ω̃ + b J));
- an element Y[m, o + p] whose column is offset by o (free of the indices) is a block of columns
  of Y, as wide as `shape` says;
- z[m,p] / √(Σ_v z[m,v]² / w + ε) is the RMS normalisation of the rows of Z, and a factor
  γ[0,p] of a one-row γ scales the columns: rmsnorm(Z) diag(γ).
"""

from __future__ import annotations

import sympy as sp
from sympy import HadamardPower, HadamardProduct, MatAdd, MatrixSymbol, OneMatrix, Sum, exp
from sympy.matrices.expressions.applyfunc import ElementwiseApplyFunction
from sympy.matrices.expressions.matexpr import MatrixElement

from ..notation.matexpr import Diag, RMSNorm, Softmax

__all__ = ["matrix_form", "NoMatrixForm"]

_ONES = "J"


class NoMatrixForm(ValueError):
    """The element-wise formula has no matrix form that these rules can find."""


def matrix_form(
    element: sp.Expr,
    indices: tuple[sp.Symbol, sp.Symbol],
    *,
    shape: tuple[sp.Expr, sp.Expr] | None = None,
) -> sp.MatrixExpr:
    r"""The matrix whose entry (row, col) is `element`.

    `element` is written in elements of `MatrixSymbol`s with 0-based sums (as SymPy writes the
    entry of a matrix product); `indices` are its two free indices, (row, col). `shape` is the
    shape of the result, needed only for a block of columns.

    Example:
        >>> import sympy as sp
        >>> n, c = sp.symbols("n c", integer=True, positive=True)
        >>> m, p, j = sp.symbols("m p j", integer=True)
        >>> Q, K = sp.MatrixSymbol("Q", n, c), sp.MatrixSymbol("K", n, c)
        >>> matrix_form(sp.Sum(Q[m, j] * K[p, j], (j, 0, c - 1)), (m, p))
        Q*K.T
    """
    row, col = indices
    form = _form(sp.sympify(element), row, col, shape)
    ones = [s for s in form.atoms(MatrixSymbol) if str(s.name) == _ONES]
    return form.xreplace({s: OneMatrix(*s.shape) for s in ones})


def _whole_axes(expr: sp.Expr) -> None:
    """Every sum runs over a whole axis of what it reads (Σ_{j=0}^{c−1} Q[m, j]), as a matrix
    product's does; a sum over part of an axis (Σ_{j=0}^{c/2−1}, shifted columns j + c/2, a
    range that reads an index) has no matrix form these rules give: NoMatrixForm, never a
    product over the whole axis."""
    for total in expr.atoms(Sum):
        for variable, low, high in total.limits:
            for element in total.function.atoms(MatrixElement):
                for index, length in zip((element.i, element.j), element.parent.shape, strict=True):
                    if variable not in sp.sympify(index).free_symbols:
                        continue
                    whole = index == variable and low == 0 and sp.expand(high - length + 1) == 0
                    if not whole:
                        raise NoMatrixForm(
                            f"the sum over {variable} = {low} … {high} reads {element}: not a "
                            "whole axis"
                        )


def _depends(expr: sp.Expr, index: sp.Symbol) -> bool:
    return index in expr.free_symbols


def _is_scalar(expr: sp.Expr, row: sp.Symbol, col: sp.Symbol) -> bool:
    """Free of the indices, and of every entry but fixed ones (ALiBi's slope μ[0, 0])."""
    fixed = all(
        not (_depends(e.i, row) or _depends(e.i, col) or _depends(e.j, row) or _depends(e.j, col))
        and not isinstance(e, Sum)
        for e in expr.atoms(MatrixElement)
    ) and not expr.has(Sum)
    return fixed and not (_depends(expr, row) or _depends(expr, col))


def _form(expr: sp.Expr, row: sp.Symbol, col: sp.Symbol, shape: tuple | None) -> sp.MatrixExpr:
    if isinstance(expr, sp.Add):
        return _add(expr, row, col, shape)
    if isinstance(expr, MatrixElement):
        return _element(expr, row, col, shape)
    if isinstance(expr, sp.Mul):
        return _product(expr, row, col, shape)
    if isinstance(expr, Sum) and _depends(expr, row) and not _depends(expr, col):
        return _row_sum(expr, row, col, shape)
    if isinstance(expr, Sum):
        return _sum(expr, row, col, shape)
    if isinstance(expr, sp.Function) and len(expr.args) == 1:
        return ElementwiseApplyFunction(_lambda(type(expr)), _form(expr.args[0], row, col, shape))
    if expr.is_Pow and _is_scalar(expr.exp, row, col) and expr.exp.is_integer and expr.exp > 1:
        return HadamardPower(_form(expr.base, row, col, shape), expr.exp)
    raise NoMatrixForm(f"no matrix form for {expr} with indices ({row}, {col})")


def _add(expr: sp.Add, row, col, shape) -> sp.MatrixExpr:
    """A sum of terms: their matrices added; a term free of the indices is that number times
    the all-ones matrix of the others' shape (ω̃_{m,p} + b: Ω̃ + b J)."""
    scalars = [term for term in expr.args if _is_scalar(term, row, col)]
    matrices = [_form(term, row, col, shape) for term in expr.args if term not in scalars]
    if not matrices:
        raise NoMatrixForm(f"no matrix form for {expr} with indices ({row}, {col})")
    if scalars:
        ones = MatrixSymbol(_ONES, *matrices[0].shape)
        matrices.append(sp.Add(*scalars) * ones)
    return MatAdd(*matrices).doit()


def _lambda(function: type) -> sp.Lambda:
    """The one-argument function applied entry by entry, as `ElementwiseApplyFunction` wants."""
    z = sp.Dummy("z")
    return sp.Lambda(z, function(z))


def _element(element: MatrixElement, row, col, shape) -> sp.MatrixExpr:
    matrix, (first, second) = element.parent, (element.i, element.j)
    if (first, second) == (row, col):
        return matrix
    if (first, second) == (col, row):
        return matrix.T
    offset = sp.expand(second - col, deep=False)
    if first == row and not (_depends(offset, row) or _depends(offset, col)) and shape:
        return matrix[:, offset : offset + shape[1]]
    raise NoMatrixForm(f"element {element} is not entry ({row}, {col}) of a matrix")


def _softmax(numerator: sp.Expr, denominator: sp.Expr, row, col, shape) -> sp.MatrixExpr | None:
    """Softmax(Z) when numerator / denominator is exp(z[row,col]) / Σ_v exp(z[row,v]); with
    exp(ζ) + Σ_v exp(z[row,v]), ζ a number (an attention sink's logit), Softmax(Z, ζ)."""
    sink = None
    if isinstance(denominator, sp.Add):
        sums = [term for term in denominator.args if isinstance(term, Sum)]
        rest = [term for term in denominator.args if not isinstance(term, Sum)]
        if len(sums) == 1 and len(rest) == 1 and isinstance(rest[0], exp):
            if _is_scalar(rest[0], row, col):
                denominator, sink = sums[0], rest[0].args[0]
    if not (isinstance(numerator, exp) and isinstance(denominator, Sum)):
        return None
    if len(denominator.limits) != 1:
        return None
    ((variable, low, high),) = denominator.limits
    if low != 0 or high.has(col):  # a sum over the column's own block is no softmax
        return None
    if denominator.function != numerator.xreplace({col: variable}):
        return None
    z = _form(numerator.args[0], row, col, shape)
    if not (high.has(row) or _whole_row(low, high, z.shape[1])):  # part of every row: none
        return None  # (up to the row's own index: a cache's rows, the keys seen so far)
    return Softmax(z, sink)


def _whole_row(low: sp.Expr, high: sp.Expr, cols: sp.Expr) -> bool:
    """Do the (0-based) limits low … high run over all `cols` columns of a row?"""
    return low == 0 and sp.simplify(high - (cols - 1)) == 0


def _rms(factors: list[sp.Expr], row, col, shape) -> sp.MatrixExpr | None:
    """rmsnorm(Z) (diag(γ)) when the factors are z[row,col], (Σ_v z[row,v]² / w + ε)^(−1/2)
    (and γ[0,col] of a one-row γ)."""
    roots = [f for f in factors if f.is_Pow and f.exp == sp.Rational(-1, 2)]
    if len(roots) != 1:
        return None
    (root,) = roots
    sums = list(root.base.atoms(Sum))
    if len(sums) != 1 or len(sums[0].limits) != 1:
        return None
    (total,), others = sums, [f for f in factors if f is not root]
    ((variable, low, high),) = total.limits
    square = total.function
    if not (square.is_Pow and square.exp == 2 and isinstance(square.base, MatrixElement)):
        return None
    z = square.base.parent
    if not _whole_row(low, high, z.shape[1]):  # over part of the row (one head's): no rmsnorm
        return None
    eps = sp.simplify(root.base - total / (high - low + 1))
    entry = z[row, col]
    gains = [f for f in others if f != entry]
    if entry not in others or eps.has(row, col, MatrixElement) or square.base != z[row, variable]:
        return None
    normed = RMSNorm(z, eps)
    if not gains:
        return normed
    (gain,) = gains
    if not (isinstance(gain, MatrixElement) and gain.parent.shape[0] == 1 and gain.j == col):
        return None
    return normed * Diag(gain.parent)


def _product(expr: sp.Mul, row, col, shape) -> sp.MatrixExpr:
    scalars = [f for f in expr.args if _is_scalar(f, row, col)]
    rest = [f for f in expr.args if not _is_scalar(f, row, col)]
    scale = sp.Mul(*scalars)
    rms = _rms(rest, row, col, shape)
    if rms is not None:
        return scale * rms if scale != 1 else rms
    numerators = [f for f in rest if not (f.is_Pow and f.exp == -1)]
    inverses = [f.base for f in rest if f.is_Pow and f.exp == -1]
    if len(numerators) == 1 and len(inverses) == 1:
        softmax = _softmax(numerators[0], inverses[0], row, col, shape)
        if softmax is not None:
            return scale * softmax if scale != 1 else softmax
    if inverses:
        raise NoMatrixForm(f"no matrix form for the quotient {expr}")
    matrices = [_form(f, row, col, shape) for f in rest]
    product = matrices[0] if len(matrices) == 1 else HadamardProduct(*matrices)
    return scale * product if scale != 1 else product


def _row_sum(total: Sum, row, col, shape) -> sp.MatrixExpr:
    """A row's sum, the same in every column: Σ_v F[row,v] = (F J)[row,col], J all ones."""
    if len(total.limits) != 1:
        raise NoMatrixForm(f"no matrix form for {total} (one index per row's sum)")
    ((variable, low, high),) = total.limits
    length = high - low + 1
    ones = MatrixSymbol(_ONES, length, shape[1] if shape else length)
    return _form(Sum(total.function * ones[variable, col], *total.limits), row, col, shape)


def _sum(total: Sum, row, col, shape) -> sp.MatrixExpr:
    """A contraction: SymPy's converters, else Σ_k F[row,k] G[k,col] split by hand."""
    _whole_axes(total)
    from sympy.tensor.array.expressions import convert_array_to_matrix, convert_indexed_to_array

    try:
        array = convert_indexed_to_array(total, first_indices=[row, col])
        converted = convert_array_to_matrix(array)
        if isinstance(converted, sp.MatrixExpr) and converted.shape[0] != 1 != converted.shape[1]:
            return converted
    except Exception:  # noqa: BLE001 - SymPy raises assorted errors where it has no rule
        pass
    if len(total.limits) != 1:
        raise NoMatrixForm(f"no matrix form for {total}")
    ((variable, _, _),) = total.limits
    left, right = [], []
    for factor in sp.Mul.make_args(total.function):
        if _depends(factor, col) and not _depends(factor, row):
            right.append(factor)
        elif not _depends(factor, col):
            left.append(factor)
        else:
            raise NoMatrixForm(f"{factor} in {total} reads both ({row}, {col})")
    if not left or not right:
        raise NoMatrixForm(f"no matrix form for {total}")
    return _form(sp.Mul(*left), row, variable, None) * _form(sp.Mul(*right), variable, col, None)
