"""The printer's matrix half: products, sums, transposes, slices and the matrix expressions of
`derive.notation.matexpr`, in the book's notation (a mixin of `AttentionPrinter`)."""

from __future__ import annotations

import sympy as sp
from sympy import MatrixSymbol
from sympy.printing.latex import LatexPrinter
from sympy.printing.precedence import PRECEDENCE

from . import letters as L
from .matexpr import Concat, Diag, Entries, GroupConcat, RMSNorm, Softmax

__all__ = ["MatrixPrinting"]


def _matrix_rank(letter: str) -> int:
    """The order of the matrices in a sum of matrix products (\\bar{Q} W_q^T + \\bar{K} W_k^T
    + ...): their entries' reading order; a matrix no letter declares, last."""
    name = {matrix: entry for entry, matrix in L.BASES.items()}.get(letter)
    order = L.reading_order()
    return order.index(name) if name in order else len(order)


_ACCENTS = (r"\mathring", r"\check", r"\tilde", r"\hat", r"\bar")


class MatrixPrinting(LatexPrinter):
    """The `_print_*` methods of matrix expressions (mixed into `AttentionPrinter`, a
    `LatexPrinter` too: they call its `_print` and `parenthesize`)."""

    def _print_MatrixSymbol(self, expr: MatrixSymbol, style: str = "plain") -> str:
        sympys: str = super()._print_MatrixSymbol(expr)
        return L.MATRIX_LATEX.get(str(expr.name), sympys)

    def _print_Transpose(self, expr: sp.Transpose) -> str:
        base = self.parenthesize(expr.arg, PRECEDENCE["Pow"])
        if "^" not in base:
            return rf"{base}^\top"
        # TeX reads a group of one accented letter as the letter: {{}\mathring{K}^{(ℓ)}}^⊤
        # keeps the two superscripts apart
        return rf"{{{{}}{base}}}^\top" if base.startswith(_ACCENTS) else rf"{{{base}}}^\top"

    def _print_MatMul(self, expr: sp.MatMul) -> str:
        scalars = [a for a in expr.args if not isinstance(a, sp.MatrixExpr)]
        matrices = [a for a in expr.args if isinstance(a, sp.MatrixExpr)]
        product = " ".join(self._factor(m) for m in matrices)
        if not scalars:
            return product
        numerator, denominator = sp.fraction(sp.Mul(*scalars))
        if denominator == 1:  # -(A ∘ \bar{A}) J, 2 X W_q: not a fraction over 1
            sign = "-" if numerator == -1 else f"{self._print(numerator)} "
            return f"{sign}{product}"
        top = product if numerator == 1 else f"{self._print(numerator)} {product}"
        if top.startswith("-"):
            return rf"-\frac{{{top[1:].lstrip()}}}{{{self._print(denominator)}}}"
        return rf"\frac{{{top}}}{{{self._print(denominator)}}}"

    def _factor(self, matrix: sp.MatrixExpr) -> str:
        """One factor of a matrix product; a Hadamard product in parentheses: (A ∘ \\bar{A}) J."""
        if isinstance(matrix, sp.HadamardProduct | sp.MatAdd):
            return rf"\left({self._print(matrix)}\right)"
        return self.parenthesize(matrix, PRECEDENCE["Mul"], strict=True)

    def _print_MatAdd(self, expr: sp.MatAdd) -> str:
        """Positive terms first, then in the order of their matrices: \\bar{Q} W_q^T + ..."""

        def key(term: sp.MatrixExpr) -> tuple:
            names = [str(s.name).removesuffix("_l") for s in _symbols_in_order(term)]
            ranks = [_matrix_rank(x) for x in names]
            return (term.could_extract_minus_sign(), term.has(sp.MatMul), ranks)

        text = ""
        for index, term in enumerate(sorted(expr.args, key=key)):
            printed = self._print(term)
            if index and printed.startswith("-"):
                text += f" - {printed[1:].lstrip()}"
            elif index:
                text += f" + {printed}"
            else:
                text = printed
        return text

    def _print_HadamardProduct(self, expr: sp.HadamardProduct) -> str:
        """A ∘ (\\bar{A} - …): plain matrices first."""
        factors = sorted(expr.args, key=lambda f: not isinstance(f, MatrixSymbol | sp.MatMul))
        return r" \circ ".join(
            rf"\left({self._print(f)}\right)" if isinstance(f, sp.MatMul) else self._factor(f)
            for f in factors
        )

    def _print_MatrixSlice(self, expr: sp.MatrixExpr) -> str:
        (row_start, row_stop, _), (start, stop, _) = expr.rowslice, expr.colslice
        rows = ":" if (row_start, row_stop) == (0, expr.parent.shape[0]) else "?"
        grouped = start.has(sp.floor)  # ⌊(ℓ−1) g/h⌋ c_h: the group's block, left as declared
        first = self._print(sp.Add(start if grouped else sp.factor(start), 1, evaluate=False))
        stop = stop if grouped else sp.factor(stop)
        last = self._print(stop)
        if stop.is_Mul and all(f.is_Symbol for f in stop.args):  # ℓ c_h: the head first
            last = " ".join(self._print(f) for f in sorted(stop.args, key=lambda f: f != L.ell))
        parent = self.parenthesize(expr.parent, PRECEDENCE["Pow"])
        return rf"{parent}_{{{rows},\; {first} \ldots {last}}}"

    def _print_OneMatrix(self, expr: sp.OneMatrix) -> str:
        """The all-ones matrix J: (A ∘ \\bar{A}) J repeats each row's sum along the row."""
        return "J"

    def _print_Softmax(self, expr: Softmax) -> str:
        inside = self._print(expr.arg)
        if expr.sink is not None:  # the sink's logit after a semicolon: softmax(Ω̂; ζ)
            inside += rf" \,;\, {self._print(expr.sink)}"
        return rf"\operatorname{{softmax}}\left({inside}\right)"

    def _print_GroupConcat(self, expr: GroupConcat) -> str:
        letter = self._print(expr.block)
        count = expr.count
        blocks = []
        for group in (sp.S.One, count):
            first, last = (self._print(x.xreplace({L.nu: group})) for x in (expr.first, expr.last))
            blocks.append(rf"\sum_{{\ell={first}}}^{{{last}}} {letter}")
        return rf"\left[\, {blocks[0]} \;\cdots\; {blocks[1]} \,\right]"

    def _print_RMSNorm(self, expr: RMSNorm) -> str:
        return rf"\operatorname{{rmsnorm}}\left({self._print(expr.arg)}\right)"

    def _print_Diag(self, expr: Diag) -> str:
        return rf"\operatorname{{diag}}\left({self._print(expr.row)}\right)"

    def _print_Entries(self, expr: Entries) -> str:
        indices = ",".join(self._print(index) for index in expr.indices)
        return rf"\left[\, {self._print(expr.entry)} \,\right]_{{{indices}}}"

    def _print_ElementwiseApplyFunction(self, expr) -> str:
        """cos Φ, σ(Z): the function taken entry by entry (a function with a `latex_name`, as
        `derive.notation.functions.Sigmoid`, with its argument in brackets)."""
        function = expr.function.expr.func
        name = {sp.cos: r"\cos", sp.sin: r"\sin", sp.exp: r"\exp"}.get(function)
        if name is not None:
            return rf"{name} {self.parenthesize(expr.expr, PRECEDENCE['Pow'])}"
        if getattr(function, "latex_name", None):
            return rf"{function.latex_name}\left({self._print(expr.expr)}\right)"
        return super()._print_ElementwiseApplyFunction(expr)

    def _print_Concat(self, expr: Concat) -> str:
        block, count = expr.block, self._print(expr.count)
        if not isinstance(block, MatrixSymbol):  # a composed block: ℓ = 1 … h side by side
            return rf"\left[\, {self._print(block)} \,\right]_{{\ell = 1 \ldots {count}}}"
        letter = L.MATRIX_LATEX[str(block.name).removesuffix("_l")]
        blocks = rf"{letter}^{{(1)}} \;\; {letter}^{{(2)}} \;\cdots\; {letter}^{{({count})}}"
        return rf"\left[\, {blocks} \,\right]"


def _symbols_in_order(expr: sp.Basic) -> list[MatrixSymbol]:
    """The matrix symbols of an expression, left to right."""
    if isinstance(expr, MatrixSymbol):
        return [expr]
    found: list[MatrixSymbol] = []
    for arg in expr.args:
        found += _symbols_in_order(arg)
    return found
