r"""The printer: SymPy's LaTeX in the book's notation.

Where SymPy's default is wrong or ugly for this derivation, `AttentionPrinter` says otherwise:

- an entry ``omega[m, p]`` prints ``\omega_{m,p}`` (SymPy: ``{\omega}_{m,p}``), ``wq[i, j]``
  ``(W_q)_{i,j}``, ``ctx[m, j]`` ``z_{m,j}``, a gradient ``dq[m, j]`` ``\bar{q}_{m,j}``, a head's
  ``omega[l, m, p]`` ``\omega^{(\ell)}_{m,p}``, a batch's ``x[b, m, i]`` ``x_{b,m,i}``;
- a product of entries keeps the book's order (``x_{m,i} (W_q)_{i,j}``, ``q_{m,j} k_{p,j}``),
  and a sum of such terms lists them in numeric index order (x_{1,2} before x_{1,10}) and in the
  order of the matrices (the terms of \bar{X} in the order \bar{Q}, \bar{K}, \bar{V});
- ``Omega_scaled`` prints ``\tilde{\Omega}``, ``Q_l`` ``Q^{(\ell)}``, ``dQ`` ``\bar{Q}``;
- ``1/sqrt(c) * Omega`` prints ``\frac{\Omega}{\sqrt{c}}``; ``exp(omega[m, p]/sqrt(c))`` prints
  ``\exp(\omega_{m,p} / \sqrt{c})``, not a nested fraction in an exponent;
- ``Softmax(Z)`` prints ``\operatorname{softmax}(Z)``, ``Concat(C_l, h)`` prints
  ``[C^{(1)} \cdots C^{(h)}]``, the all-ones matrix ``J``.

Indices are already 1-based in the objects (see `derive.notation.letters`): nothing is shifted.
"""

from __future__ import annotations

import sympy as sp
from sympy import Indexed
from sympy.printing.latex import LatexPrinter

from . import letters as L
from .matrix_printer import MatrixPrinting

__all__ = ["AttentionPrinter", "latex", "ordered_terms", "term_key"]

#: The order of the matrices in a sum of matrix products (\bar{Q} W_q^T + \bar{K} W_k^T + ...).
_entry_key = L.reading_key


def term_key(term: sp.Expr) -> tuple:
    """Where a term goes in a sum (or a factor in a product): by its entries, in the order they
    print."""
    while isinstance(term, sp.Sum):
        term = term.function
    found = sorted(term.atoms(Indexed), key=_entry_key)
    return tuple(_entry_key(entry) for entry in found)


def ordered_terms(expr: sp.Add) -> list[sp.Expr]:
    """The terms of a sum in the order they print: positive first, then by their entries in
    reading order and numeric index order (x_{1,2} before x_{1,10})."""
    return sorted(
        sp.Add.make_args(expr),
        key=lambda term: (term.could_extract_minus_sign(), not term.has(Indexed), term_key(term)),
    )


class AttentionPrinter(MatrixPrinting, LatexPrinter):
    """`LatexPrinter` with the book's notation (see the module docstring for the table)."""

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

    # -- entries and scalars ---------------------------------------------------------------------

    def _print_MatrixElement(self, expr: sp.Expr) -> str:
        """An entry of a matrix at fixed indices in a matrix form (ALiBi's slope μ[0, 0] times
        the distances): as its entry is written, 1-based (μ_{1,1})."""
        name = str(expr.parent.name)
        if name.removesuffix("_l") not in L.BASES.values():
            return super()._print_MatrixElement(expr)
        entry = L.base(L.name_of(name))[sp.expand(expr.i + 1), sp.expand(expr.j + 1)]
        return self._print(entry)

    def _print_Indexed(self, expr: Indexed) -> str:
        name = expr.base.label.name
        letter = L.ENTRY_LATEX.get(name) or self._print(expr.base.label)
        indices = list(expr.indices)
        batch = indices[:1] if indices[0] == L.b else []  # a batch index comes first
        rest = indices[len(batch) :]
        head = rest.pop(0) if len(rest) == 3 else None  # then a head index, as a superscript
        subscript = ",".join(self._print(index) for index in batch + rest)
        if head is None:
            return f"{letter}_{{{subscript}}}"
        return f"{letter}^{{({self._print(head)})}}_{{{subscript}}}"

    def _print_Pow(self, expr: sp.Pow) -> str:
        """A head's entry to a power in braces, {q^{(ℓ)}_{m,j}}^{2}: never a double
        superscript."""
        base, power = expr.args
        if isinstance(base, Indexed) and len(base.indices) == 3 and power.is_Integer and power > 0:
            return rf"\left({self._print(base)}\right)^{{{self._print(power)}}}"
        return super()._print_Pow(expr)

    def _print_Pi(self, expr: sp.Expr) -> str:  # π (Llama 3.1's wavelengths 2π/ω)
        return r"\pi"

    def _print_Symbol(self, expr: sp.Symbol, style: str = "plain") -> str:
        special = {L.ell: r"\ell", L.ell2: r"\ell'", L.c_h: "c_h", L.j2: "j'", L.lam: r"\lambda"}
        if expr in special:
            return special[expr]
        if expr.name.startswith("gmax_"):  # the largest gain of QK-norm, max_j |(γ_q)_{1,j}|
            return rf"\max_{{j}} \left|(\gamma_{expr.name[-1]})_{{1,j}}\right|"
        if expr.name.startswith("sigma_") and expr.name.endswith("^2"):  # a variance σ_q²
            return rf"\sigma_{{{expr.name[6:-2]}}}^{{2}}"
        return super()._print_Symbol(expr, style=style)

    def _print_Add(self, expr: sp.Add, order: str | None = None) -> str:
        if not expr.has(Indexed):  # SymPy's order, the positive terms first
            terms = self._as_ordered_terms(expr, order=order)
            terms = sorted(terms, key=lambda term: term.could_extract_minus_sign())
        else:
            terms = ordered_terms(expr)
        text = ""
        for index, term in enumerate(terms):
            printed = self._print(term)
            if index and printed.startswith("-"):
                text += " - " + printed[1:].lstrip()
            elif index:
                text += " + " + printed
            else:
                text = printed
        return text

    def _print_Mul(self, expr: sp.Mul) -> str:
        factors = expr.args
        number = sp.Mul(*[f for f in factors if f.is_number])
        if number.is_positive and not number.is_Rational and (1 / number**2).is_Integer:
            # ω_{1,2}/√2, not √2 ω_{1,2} / 2: the book's division by the square root
            rest = sp.Mul(*[f for f in factors if not f.is_number])
            return rf"\frac{{{self._print(rest)}}}{{\sqrt{{{1 / number**2}}}}}"
        if len(factors) > 1 and all(isinstance(f, Indexed) for f in factors):
            return " ".join(self._print(f) for f in sorted(factors, key=_entry_key))
        entries = [f for f in factors if not f.is_number]
        if number == -1 and len(entries) > 1 and all(isinstance(f, Indexed) for f in entries):
            return "- " + " ".join(self._print(f) for f in sorted(entries, key=_entry_key))
        expectations = [f for f in factors if type(f).__name__ == "E"]
        if len(expectations) == len(factors) > 1:  # E[q …] E[k …]: in reading order
            key = lambda f: min(L.reading_key(e) for e in f.atoms(Indexed))  # noqa: E731
            return " ".join(self._print(f) for f in sorted(factors, key=key))
        entries = [f for f in factors if isinstance(f, Indexed)]
        derivatives = [f for f in factors if isinstance(f, sp.Derivative)]
        if entries and derivatives and len(entries) + len(derivatives) == len(factors):
            # the chain rule: \bar{a}_{m',t} ∂a_{m',t}/∂ω̃_{m,p}, the gradient first
            return " ".join(self._print(f) for f in [*entries, *derivatives])
        sums = [f for f in factors if isinstance(f, sp.Add)]
        if (
            len(sums) == 1
            and sums[0].has(L.ell)
            and all(f.is_Symbol for f in factors if f is not sums[0])
        ):
            # an index offset reads (\ell - 1) c_h, the sum first
            rest = " ".join(self._print(f) for f in factors if f is not sums[0])
            return rf"\left({self._print(sums[0])}\right) {rest}"
        if entries and len(sums) == 1 and len(entries) + 1 == len(factors):
            # the entries first: a_{m,p} (\bar{a}_{m,p} - ...), as a weighted term is written
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

    def _print_NegativeInfinity(self, expr: sp.Expr) -> str:
        return r"-\infty"

    def _print_Infinity(self, expr: sp.Expr) -> str:
        return r"\infty"

    def _print_Relational(self, expr: sp.Rel) -> str:
        """Ranges read left to right, smaller first: p \\le m, not m \\ge p."""
        if isinstance(expr, sp.GreaterThan | sp.StrictGreaterThan):
            expr = expr.reversed
        return super()._print_Relational(expr)

    def _print_Function(self, expr: sp.Function, exp: str | None = None) -> str:
        """The expectation E[·] and the variance Var(·) of the stated assumptions."""
        name = type(expr).__name__
        if name in ("E", "Var") and len(expr.args) == 1:
            inner = self._print(expr.args[0])
            body = (
                rf"\mathbb{{E}}\left[{inner}\right]"
                if name == "E"
                else rf"\operatorname{{Var}}\left({inner}\right)"
            )
            return body if exp is None else rf"{body}^{{{exp}}}"
        return super()._print_Function(expr, exp)

    def _print_Sum(self, expr: sp.Sum) -> str:
        """Several limits as nested sums, the outermost first: \\sum_j \\sum_{j'} f."""
        if len(expr.limits) == 1:
            return super()._print_Sum(expr)
        inner = sp.Sum(expr.function, expr.limits[0])
        for limit in expr.limits[1:-1]:
            inner = sp.Sum(inner, limit)  # SymPy would merge these back: print by hand
        variable, low, high = expr.limits[-1]
        head = rf"\sum_{{{self._print(variable)}={self._print(low)}}}^{{{self._print(high)}}}"
        return f"{head} {self._print(inner)}"

    def _print_ceiling(self, expr: sp.Expr, exp: str | None = None) -> str:
        """⌈x⌉ with delimiters of a fixed size (YaRN's rounded range): KaTeX draws a ceiling
        or floor stretched around a tall fraction with a malformed path."""
        body = rf"\lceil {self._print(expr.args[0])} \rceil"
        return body if exp is None else rf"\left({body}\right)^{{{exp}}}"

    def _print_floor(self, expr: sp.Expr, exp: str | None = None) -> str:
        """⌊x⌋, as ⌈x⌉ (`_print_ceiling`)."""
        body = rf"\lfloor {self._print(expr.args[0])} \rfloor"
        return body if exp is None else rf"\left({body}\right)^{{{exp}}}"

    def _print_Heaviside(self, expr: sp.Expr, exp: str | None = None) -> str:
        """θ(x): its value at 0 (the second argument, 0 in a derivative) is the convention the
        backward section states, not part of each formula."""
        body = rf"\theta\left({self._print(expr.args[0])}\right)"
        return body if exp is None else rf"{body}^{{{exp}}}"

    def _print_KroneckerDelta(self, expr: sp.KroneckerDelta, exp: str | None = None) -> str:
        body = rf"\delta_{{{self._print(expr.args[0])},{self._print(expr.args[1])}}}"
        return body if exp is None else rf"{body}^{{{exp}}}"

    def _print_Derivative(self, expr: sp.Derivative) -> str:
        if len(expr.variable_count) == 1 and expr.variable_count[0][1] == 1:
            variable = self._print(expr.variables[0])
            return rf"\frac{{\partial {self._print(expr.expr)}}}{{\partial {variable}}}"
        return super()._print_Derivative(expr)

    # -- matrices --------------------------------------------------------------------------------


_PRINTER = AttentionPrinter()


def latex(expr: sp.Basic, **settings: object) -> str:
    """LaTeX of a SymPy object in the book's notation (`AttentionPrinter`).

    Args:
        expr: the SymPy object to print: an expression, a matrix, an equation (``omega[m, p]``).
        **settings: SymPy's `LatexPrinter` settings (``mul_symbol="dot"``), and `decimals`:
            print every Float with exactly this many decimals; none given: the book's defaults.

    Returns:
        The LaTeX, without `$` delimiters (``\\omega_{m,p}``).

    Raises:
        TypeError: when a setting is not one `LatexPrinter` or `decimals` knows.
    """
    printer = AttentionPrinter(settings) if settings else _PRINTER
    return printer.doprint(expr)
