r"""The backward pass at symbolic sizes: each gradient as a `Step` (matrix form, entry, shapes).

Given dC = ∂L/∂C (n × c) for a scalar loss L, every gradient has the shape of its matrix:

$$dA = dC\,V^\top,\quad dV = A^\top dC,\quad d\tilde\Omega = A \circ \big(dA - (A \circ dA)\,J\big),
  \quad d\Omega = \frac{d\tilde\Omega}{\sqrt{c}},\quad dQ = d\Omega\,K,\quad dK = d\Omega^\top Q,$$
$$dW_q = X^\top dQ,\ dW_k = X^\top dK,\ dW_v = X^\top dV,\quad
  dX = dQ\,W_q^\top + dK\,W_k^\top + dV\,W_v^\top$$

(J: the n × n matrix of ones, so (A ∘ dA) J repeats each row's sum Σ_r a_{m,r} da_{m,r}). As
for the forward steps, the element-wise forms are not typed in: SymPy expands each matrix
expression entry by entry and `element_of` only renames its sums to the seed's 1-based indices.
That these matrix forms are the derivatives is proved at explicit sizes by `explicit_gradients`
(chain rule entry by entry) and, for the softmax, at symbolic size by `softmax_backward`.
"""

from __future__ import annotations

import sympy as sp
from sympy import Eq, HadamardProduct, MatAdd, MatMul, OneMatrix, Sum, Transpose, sqrt
from sympy.matrices.expressions.matexpr import MatrixElement

from . import _notation as N
from ._steps import Step

__all__ = ["backward_steps", "element_of", "GRADIENT_OF"]

#: Each gradient's forward matrix (shapes table of the documents): dW_q is shaped like W_q.
GRADIENT_OF = {
    "dC": "C", "dA": "A", "dV": "V", "dOmega_scaled": "Omega_scaled", "dOmega": "Omega",
    "dQ": "Q", "dK": "K", "dW_q": "W_q", "dW_k": "W_k", "dW_v": "W_v", "dX": "X",
}  # fmt: skip

_SHAPES = {
    "X": (N.n, N.d), "W_q": (N.d, N.c), "W_k": (N.d, N.c), "W_v": (N.d, N.c),
    "Q": (N.n, N.c), "K": (N.n, N.c), "V": (N.n, N.c), "Omega": (N.n, N.n),
    "Omega_scaled": (N.n, N.n), "A": (N.n, N.n), "C": (N.n, N.c), "W_o": (N.c, N.c),
    "C_concat": (N.n, N.c),
}  # fmt: skip

#: Letter -> entry base, for the forward matrices and their gradients.
_ENTRY = {letter: name for name, (letter, _) in N.BASES.items()}


def _matrix(letter: str) -> sp.MatrixSymbol:
    shape = _SHAPES[letter.removeprefix("d")] if letter.startswith("d") else _SHAPES[letter]
    return N.matrix_symbol(letter, *shape)


def element_of(expr: sp.MatrixExpr, row: sp.Symbol, col: sp.Symbol, index: sp.Symbol) -> sp.Expr:
    """Entry (row, col) of a matrix expression, expanded by SymPy, in the seed's indices.

    SymPy writes every sum over a 0-based dummy; each becomes a sum over `index` running 1 …,
    and each `MatrixElement` M[a, b] the seed's entry m_{a+1, b+1}.
    """
    expanded = expr[row - 1, col - 1]

    def one_based(total: Sum) -> Sum:
        ((dummy, low, high),) = total.limits
        return Sum(total.function.xreplace({dummy: index - 1}), (index, low + 1, high + 1))

    def rename(element: MatrixElement) -> sp.Expr:
        return N.base(_ENTRY[str(element.parent.name)])[element.i + 1, element.j + 1]

    expanded = expanded.replace(lambda e: isinstance(e, Sum), one_based)
    return expanded.replace(lambda e: isinstance(e, MatrixElement), rename)


def _step(name: str, output: str, title: str, rhs: sp.MatrixExpr, index: tuple) -> Step:
    """A backward step: dY = rhs, with the element at (row, col) summed over `index`."""
    row, col, dummy = index
    out = _matrix(output)
    entry = N.base(_ENTRY[output])[row, col]
    letters = {str(s.name) for s in rhs.atoms(sp.MatrixSymbol)} | {output}
    return Step(
        name=name,
        output=output,
        title=title,
        matrix=Eq(out, rhs, evaluate=False),
        element=Eq(entry, element_of(rhs, row, col, dummy), evaluate=False),
        shapes={letter: _matrix(letter).shape for letter in sorted(letters)},
    )


def softmax_matrix_form() -> sp.MatrixExpr:
    """dΩ̃ = A ∘ (dA − (A ∘ dA) J): the softmax Jacobian applied to every row at once."""
    a, da = _matrix("A"), _matrix("dA")
    return HadamardProduct(a, MatAdd(da, -MatMul(HadamardProduct(a, da), OneMatrix(N.n, N.n))))


def backward_steps() -> tuple[Step, ...]:
    """The backward pass of the single head at symbolic n, d, c, from dC back to dX.

    Each step's `name` is the forward step it runs backwards through (``context``, ``weights``,
    ``scaled_scores``, ``scores``, ``projection``), its `output` the gradient (``dV`` …).
    """
    m, p, i, j, r = N.m, N.p, N.i, N.j, N.r
    dc, dq, dk, dv, do = (_matrix(x) for x in ("dC", "dQ", "dK", "dV", "dOmega"))
    x, q, k, v, a = (_matrix(x) for x in ("X", "Q", "K", "V", "A"))
    dx = MatAdd(
        *(MatMul(g, Transpose(_matrix(f"W_{w}"))) for g, w in ((dq, "q"), (dk, "k"), (dv, "v")))
    )
    return (
        _step("context", "dA", "Through the context", MatMul(dc, Transpose(v)), (m, p, j)),
        _step("context", "dV", "Through the context", MatMul(Transpose(a), dc), (p, j, m)),
        _step("weights", "dOmega_scaled", "Through the softmax", softmax_matrix_form(), (m, p, r)),
        _step(
            "scaled_scores",
            "dOmega",
            "Through the scaling",
            MatMul(1 / sqrt(N.c), _matrix("dOmega_scaled")),
            (m, p, r),
        ),
        _step("scores", "dQ", "Through the scores", MatMul(do, k), (m, j, p)),
        _step("scores", "dK", "Through the scores", MatMul(Transpose(do), q), (p, j, m)),
        _step("projection", "dW_q", "To the weights", MatMul(Transpose(x), dq), (i, j, m)),
        _step("projection", "dW_k", "To the weights", MatMul(Transpose(x), dk), (i, j, m)),
        _step("projection", "dW_v", "To the weights", MatMul(Transpose(x), dv), (i, j, m)),
        _step("projection", "dX", "To the inputs", dx, (m, i, j)),
    )


def multi_head_backward_steps() -> tuple[Step, ...]:
    """The gradients the multi-head variant adds before each head's own backward pass:
    dĈ = dC W_oᵀ, dW_o = Ĉᵀ dC (then head ℓ takes its columns of dĈ as its dC)."""
    m, i, j = N.m, N.i, N.j
    dc, wo, cat = _matrix("dC"), _matrix("W_o"), _matrix("C_concat")
    return (
        _step("projection", "dC_concat", "Through W_o", MatMul(dc, Transpose(wo)), (m, j, i)),
        _step("projection", "dW_o", "To W_o", MatMul(Transpose(cat), dc), (i, j, m)),
    )
