r"""The printer: SymPy's LaTeX, in the seed's notation.

Where SymPy's default is wrong or ugly for this derivation, `AttentionPrinter` says otherwise:

- an entry ``omega[m, p]`` prints ``\omega_{m,p}`` (SymPy: ``{\omega}_{m,p}``); ``wq[i, j]``
  prints ``(W_q)_{i,j}``; ``ctx[m, j]`` prints ``c_{m,j}``; a head's ``omega[l, m, p]`` prints
  ``\omega^{(\ell)}_{m,p}``;
- a product of entries keeps the seed's order: ``x_{m,i} (W_q)_{i,j}``, ``q_{m,j} k_{p,j}``;
- ``Omega_scaled`` prints ``\tilde{\Omega}``, ``Q_l`` prints ``Q^{(\ell)}``, ``K.T`` ``K^\top``;
- ``1/sqrt(c) * Omega`` prints ``\frac{\Omega}{\sqrt{c}}``, not ``\frac{1}{\sqrt{c}} \Omega``;
- ``exp(omega[m, p]/sqrt(c))`` prints ``\exp(\omega_{m,p} / \sqrt{c})``, not a nested fraction
  in an exponent;
- ``Softmax(Z)`` prints ``\operatorname{softmax}(Z)``; ``Concat(C_l, h)`` prints
  ``[C^{(1)} \; C^{(2)} \cdots C^{(h)}]``.

Indices are already 1-based in the objects (see `derive._notation`), so nothing is shifted here.
"""

from __future__ import annotations

import re

import sympy as sp
from sympy import Indexed, MatrixSymbol
from sympy.printing.latex import LatexPrinter
from sympy.printing.precedence import PRECEDENCE

from . import _notation as N
from ._steps import Concat, Softmax, Step

__all__ = ["AttentionPrinter", "latex", "step_latex", "split_sum", "visible_width"]

#: Order of the factors in a product of entries: the seed writes x W, q k, a v, ĉ W_o.
_RANK = {name: rank for rank, name in enumerate(
    ["x", "ctxcat", "a", "dctx", "dctxcat", "domega", "domegatilde", "da", "dq", "dk", "dv",
     "q", "wq", "wk", "wv", "wo", "k", "v", "omega", "omegatilde", "ctx"]
)}  # fmt: skip


class AttentionPrinter(LatexPrinter):
    """`LatexPrinter` with the seed's notation (see the module docstring for the table)."""

    printmethod = "_attention_latex"
    #: ``decimals``: print every Float with exactly this many decimals (numeric examples).
    _default_settings = {**LatexPrinter._default_settings, "decimals": None}

    def __init__(self, settings: dict | None = None) -> None:
        super().__init__({"mat_delim": "(", "mat_str": "matrix", **(settings or {})})

    def _print_Float(self, expr: sp.Float) -> str:
        decimals = self._settings["decimals"]
        if decimals is None:
            return super()._print_Float(expr)
        return f"{float(expr):.{decimals}f}".replace("-0." + "0" * decimals, "0." + "0" * decimals)

    # -- entries ---------------------------------------------------------------------------------

    def _print_Indexed(self, expr: Indexed) -> str:
        name = expr.base.label.name
        letter = N.BASES[name][1] if name in N.BASES else self._print(expr.base.label)
        indices = list(expr.indices)
        batch = indices[:1] if indices[0] == N.b else []  # a batch index comes first
        rest = indices[len(batch) :]
        head = rest.pop(0) if len(rest) == 3 else None  # then a head index, as a superscript
        subscript = ",".join(self._print(index) for index in batch + rest)
        if head is None:
            return f"{letter}_{{{subscript}}}"
        return f"{letter}^{{({self._print(head)})}}_{{{subscript}}}"

    def _print_Symbol(self, expr: sp.Symbol, style: str = "plain") -> str:
        if expr == N.ell:
            return r"\ell"
        if expr == N.c_h:
            return "c_h"
        return super()._print_Symbol(expr, style=style)

    def _print_Mul(self, expr: sp.Mul) -> str:
        factors = expr.args
        if len(factors) > 1 and all(isinstance(f, Indexed) for f in factors):
            ordered = sorted(factors, key=lambda f: _RANK.get(f.base.label.name, 99))
            return " ".join(self._print(f) for f in ordered)
        entries = [f for f in factors if isinstance(f, Indexed)]
        sums = [f for f in factors if isinstance(f, sp.Add)]
        if entries and len(sums) == 1 and len(entries) + 1 == len(factors):
            # the entries first: a_{m,p} (da_{m,p} - ...), as the seed writes a weighted term
            head = self._print(sp.Mul(*entries)) if len(entries) > 1 else self._print(entries[0])
            return rf"{head} \left({self._print(sums[0])}\right)"
        return super()._print_Mul(expr)

    def _print_exp(self, expr: sp.Expr, exp: str | None = None) -> str:
        numerator, denominator = sp.fraction(expr.args[0])
        top = self._print(numerator)
        if isinstance(numerator, sp.Add) and denominator != 1:
            top = rf"\left({top}\right)"
        inner = top if denominator == 1 else f"{top} / {self._print(denominator)}"
        body = rf"\exp\left({inner}\right)"
        return body if exp is None else rf"{body}^{{{exp}}}"

    # -- matrices --------------------------------------------------------------------------------

    def _print_MatrixSymbol(self, expr: MatrixSymbol, style: str = "plain") -> str:
        name = str(expr.name)
        return N.MATRIX_LETTERS.get(name, super()._print_MatrixSymbol(expr))

    def _print_Transpose(self, expr: sp.Transpose) -> str:
        base = self.parenthesize(expr.arg, PRECEDENCE["Pow"])
        return rf"{{{base}}}^\top" if "^" in base else rf"{base}^\top"

    def _print_MatMul(self, expr: sp.MatMul) -> str:
        scalars = [a for a in expr.args if not isinstance(a, sp.MatrixExpr)]
        matrices = [a for a in expr.args if isinstance(a, sp.MatrixExpr)]
        if scalars and matrices:
            numerator, denominator = sp.fraction(sp.Mul(*scalars))
            product = " ".join(self._factor(m) for m in matrices)
            if denominator == 1:  # -(A ∘ dA) J, not a fraction over 1
                sign = "-" if numerator == -1 else f"{self._print(numerator)} "
                return f"{sign}{product}"
            top = product if numerator == 1 else f"{self._print(numerator)} {product}"
            return rf"\frac{{{top}}}{{{self._print(denominator)}}}"
        return " ".join(self._factor(m) for m in matrices)

    def _factor(self, matrix: sp.MatrixExpr) -> str:
        """One factor of a matrix product; a Hadamard product in parentheses: (A ∘ dA) J."""
        if isinstance(matrix, sp.HadamardProduct):
            return rf"\left({self._print(matrix)}\right)"
        return self.parenthesize(matrix, PRECEDENCE["Mul"], strict=True)

    def _print_MatAdd(self, expr: sp.MatAdd) -> str:
        """Positive terms first: dA - (A ∘ dA) J, not -(A ∘ dA) J + dA."""
        terms = [self._print(term) for term in expr.args]
        terms = [t for t in terms if not t.startswith("-")] + [
            t for t in terms if t.startswith("-")
        ]
        text = terms[0]
        for term in terms[1:]:
            text += f" - {term[1:]}" if term.startswith("-") else f" + {term}"
        return text

    def _print_MatrixSlice(self, expr: sp.MatrixExpr) -> str:
        (row_start, row_stop, _), (start, stop, _) = expr.rowslice, expr.colslice
        rows = ":" if (row_start, row_stop) == (0, expr.parent.shape[0]) else "?"
        first = f"{self._print(start)} + 1" if start != 0 else "1"
        parent = self.parenthesize(expr.parent, PRECEDENCE["Pow"])
        return rf"{parent}_{{{rows},\; {first} \ldots {self._print(stop)}}}"

    def _print_OneMatrix(self, expr: sp.OneMatrix) -> str:
        """The all-ones matrix J (n × n in the backward pass: (A ∘ dA) J repeats row sums)."""
        return "J"

    def _print_KroneckerDelta(self, expr: sp.KroneckerDelta, exp: str | None = None) -> str:
        body = rf"\delta_{{{self._print(expr.args[0])},{self._print(expr.args[1])}}}"
        return body if exp is None else rf"{body}^{{{exp}}}"

    def _print_Derivative(self, expr: sp.Derivative) -> str:
        if len(expr.variable_count) == 1 and expr.variable_count[0][1] == 1:
            variable = self._print(expr.variables[0])
            return rf"\frac{{\partial {self._print(expr.expr)}}}{{\partial {variable}}}"
        return super()._print_Derivative(expr)

    def _print_Softmax(self, expr: Softmax) -> str:
        return rf"\operatorname{{softmax}}\left({self._print(expr.arg)}\right)"

    def _print_Concat(self, expr: Concat) -> str:
        head, heads = expr.args[0], self._print(expr.args[1])
        if not isinstance(head, MatrixSymbol):  # a composed head: the heads ℓ = 1 … h side by side
            return rf"\left[\, {self._print(head)} \,\right]_{{\ell = 1 \ldots {heads}}}"
        letter = N.MATRIX_LETTERS[str(head.name).removesuffix("_l")]
        blocks = rf"{letter}^{{(1)}} \;\; {letter}^{{(2)}} \;\cdots\; {letter}^{{({heads})}}"
        return rf"\left[\, {blocks} \,\right]"


_PRINTER = AttentionPrinter()


def latex(expr: sp.Basic, **settings: object) -> str:
    """LaTeX of a SymPy object in the seed's notation (`AttentionPrinter`)."""
    printer = AttentionPrinter(settings) if settings else _PRINTER
    return printer.doprint(expr)


def step_latex(step: Step) -> str:
    r"""A step's two equations, matrix level then element-wise, joined by ``\qquad``."""
    return rf"{latex(step.matrix)} \qquad {latex(step.element)}"


def visible_width(tex: str) -> int:
    """A rough count of the characters a LaTeX formula shows: commands that draw nothing
    (``\\left``, ``\\right``, braces, sub- and superscript marks) count 0, a command that
    draws one symbol (``\\omega``, ``\\sqrt``) counts 1, ``\\exp`` counts 3."""
    tex = re.sub(r"\\(left|right)\b", "", tex)
    tex = re.sub(r"\\exp\b", "exp", tex)
    tex = re.sub(r"\\[a-zA-Z]+", "x", tex)
    return len(re.sub(r"[{}^_\s]", "", tex))


def split_sum(terms: list[str], *, width: int = 56) -> list[str]:
    """Group LaTeX terms of a sum into lines of about `width` visible characters.

    Returns the lines; the caller joins them with a line break and ``+``. A term wider than
    `width` gets a line of its own.
    """
    lines: list[list[str]] = [[]]
    length = 0
    for term in terms:
        size = visible_width(term) + 1
        if lines[-1] and length + size > width:
            lines.append([])
            length = 0
        lines[-1].append(term)
        length += size
    return [" + ".join(line) for line in lines]
