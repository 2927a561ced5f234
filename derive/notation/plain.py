r"""Plain text in the book's notation, for a terminal, a JSON report or a commit message.

The LaTeX printer (`derive.notation.printer`) is the reference; this one makes the same choices
in Unicode: an entry ``omega[m, p]`` prints ``ω[m,p]``, ``omegatilde`` ``ω̃``, ``ctx`` ``z`` (the
entries of C), a head's ``omega[l, m, p]`` ``ω⁽ℓ⁾[m,p]``, a gradient ``dq[m, j]`` ``q̄[m,j]``;
the matrix ``Omega_scaled`` prints ``Ω̃``, ``Q_l`` ``Q⁽ℓ⁾``, ``dQ`` ``Q̄``; ``1/sqrt(c)*Omega``
prints ``Ω/√c``, ``Softmax(Z)`` ``softmax(Z)``, ``Concat(C_l, h)`` ``[C⁽¹⁾ … C⁽ʰ⁾]``.

    >>> import sympy as sp
    >>> from derive.notation import letters as L
    >>> plain(sp.Eq(L.base("omegatilde")[L.m, L.p], L.base("omega")[L.m, L.p] / sp.sqrt(L.c)))
    'ω̃[m,p] = ω[m,p]/√c'
"""

from __future__ import annotations

import re
import unicodedata

import sympy as sp
from sympy import Indexed, MatrixSymbol
from sympy.printing.precedence import PRECEDENCE
from sympy.printing.str import StrPrinter

from . import letters as L
from .functions import Sigmoid
from .matexpr import Concat, Softmax
from .printer import ordered_terms

__all__ = ["PlainPrinter", "plain"]

#: The adjoint's bar, as a combining character: q̄, Ω̄.
_BAR = "\u0304"
_SUPERSCRIPT = str.maketrans("0123456789hℓ()'", "⁰¹²³⁴⁵⁶⁷⁸⁹ʰˡ⁽⁾′")
#: LaTeX's accents, as combining characters (ω̃, ω̂, ω̆, ω̇, q̌, q̊, x̄).
_ACCENTS = {
    "tilde": "\u0303",
    "hat": "\u0302",
    "breve": "\u0306",
    "dot": "\u0307",
    "check": "\u030c",
    "mathring": "\u030a",
    "bar": "\u0304",
}
#: Greek letters by their names (LaTeX's, and SymPy's symbol names): the same table.
_GREEK: dict[str, str] = dict(
    zip(
        "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi pi rho sigma tau "
        "upsilon phi chi psi omega Gamma Delta Theta Lambda Xi Pi Sigma Upsilon Phi Psi Omega ell "
        "varepsilon varphi".split(),
        "αβγδεζηθικλμνξπρστυφχψωΓΔΘΛΞΠΣΥΦΨΩℓεφ",
        strict=True,
    )
)


def unicode_of(tex: str) -> str:
    """A letter's LaTeX in plain text: ``\\breve{\\omega}`` -> ``ω̆``, ``(W_q)`` -> ``W_q``,
    ``W_{dkv}`` -> ``W_dkv``, ``(\\gamma_q)`` -> ``γ_q``, ``q^{(2)}`` -> ``q⁽²⁾``."""
    text = tex.strip()
    if text.startswith("(") and text.endswith(")"):
        text = text[1:-1]

    def accent(match: re.Match) -> str:
        inner = unicode_of(match.group(2))
        return inner[:1] + _ACCENTS[match.group(1)] + inner[1:]

    names = "|".join(_ACCENTS)
    while re.search(rf"\\({names})\{{", text):
        text = re.sub(rf"\\({names})\{{([^{{}}]*)\}}", accent, text)
    text = re.sub(r"\\([A-Za-z]+)", lambda m: _GREEK.get(m.group(1), m.group(1)), text)
    text = re.sub(r"\^\{\(([^{}]*)\)\}", lambda m: f"({m.group(1)})".translate(_SUPERSCRIPT), text)
    return unicodedata.normalize("NFC", text.replace("{", "").replace("}", "").replace(" ", ""))


def _entry_letter(name: str) -> str:
    """An entry's letter in plain text: its `Letter`'s `plain`, else read off its LaTeX; a
    name no letter declares, as it is."""
    letter = L.LETTERS.get(name)
    if letter is None:
        return name
    return letter.plain or unicode_of(letter.letter_latex)


def _matrix_letter(matrix: str) -> str:
    """A matrix in plain text: Ω̃ for Omega_scaled, W_q for W_q; one no letter declares, as it
    is."""
    return unicode_of(L.MATRIX_LATEX[matrix]) if matrix in L.MATRIX_LATEX else matrix


def _symbol(name: str) -> str:
    """A symbol's name in plain text: a Greek name as its letter (κ, α_l), ℓ for l."""
    head, underscore, tail = name.partition("_")
    if name in ("l", "l'"):
        return "ℓ" + name[1:]
    head = _GREEK.get(head, head)
    return head + underscore + tail


_RELATIONS = {"<=": "≤", ">=": "≥", "<": "<", ">": ">", "==": "=", "!=": "≠"}


def _bar(text: str) -> str:
    """Ω -> Ω̄, W_q -> W̄_q: the bar on the letter, not on its subscript."""
    return text[0] + _BAR + text[1:]


def _head(index: str) -> str:
    """(ℓ) as a superscript where Unicode has one, else ^(…)."""
    wrapped = f"({index})"
    raised = wrapped.translate(_SUPERSCRIPT)
    return raised if all(ch in "⁰¹²³⁴⁵⁶⁷⁸⁹ʰˡ⁽⁾′" for ch in raised) else f"^{wrapped}"


class PlainPrinter(StrPrinter):
    """`StrPrinter` in the book's notation (see the module docstring)."""

    #: Not StrPrinter's ``_sympystr``, which `Indexed` defines and would print first.
    printmethod = "_plain"

    def _print_Indexed(self, expr: Indexed) -> str:
        name: str = expr.base.label.name
        gradient = name.startswith("d") and name[1:] in L.LETTERS
        letter = _bar(_entry_letter(name[1:])) if gradient else _entry_letter(name)
        indices = list(expr.indices)
        head = indices.pop(0) if len(indices) == 3 else None
        text = letter if head is None else letter + _head(self._print(head))
        return f"{text}[{','.join(self._print(index) for index in indices)}]"

    def _print_MatrixElement(self, expr: sp.Expr) -> str:
        """An entry of a matrix at fixed indices in a matrix form (a user's learnable s[0, 0],
        ALiBi's slope μ[0, 0]): as its entry is written, 1-based (s[1,1])."""
        name = str(expr.parent.name)
        if name.removesuffix("_l") not in L.BASES.values():
            return super()._print_MatrixElement(expr)
        entry = L.base(L.name_of(name))[sp.expand(expr.i + 1), sp.expand(expr.j + 1)]
        return self._print(entry)

    def _print_Symbol(self, expr: sp.Symbol) -> str:
        return _symbol(expr.name)

    def _print_MatrixSymbol(self, expr: MatrixSymbol) -> str:
        name = str(expr.name)
        gradient = L.is_gradient(name)
        base = name[1:] if gradient else name
        head = base.endswith("_l")
        base = base.removesuffix("_l")
        text = _matrix_letter(base)
        text = _bar(text) if gradient else text
        return text + "⁽ˡ⁾" if head else text

    def _print_Transpose(self, expr: sp.Transpose) -> str:
        return self.parenthesize(expr.arg, PRECEDENCE["Pow"]) + "ᵀ"

    def _print_MatMul(self, expr: sp.MatMul) -> str:
        scalars = [a for a in expr.args if not isinstance(a, sp.MatrixExpr)]
        matrices = [a for a in expr.args if isinstance(a, sp.MatrixExpr)]
        product = " ".join(self._factor(m) for m in matrices)
        if not scalars:
            return product
        numerator, denominator = sp.fraction(sp.Mul(*scalars))
        if numerator == -1:
            product = "-" + product
        elif numerator != 1:
            product = f"{self.parenthesize(numerator, PRECEDENCE['Mul'])} {product}"
        if denominator == 1:
            return product
        return f"{product}/{self.parenthesize(denominator, PRECEDENCE['Pow'], strict=True)}"

    def _factor(self, matrix: sp.MatrixExpr) -> str:
        """One factor of a product; a Hadamard product or a sum in parentheses: (A ∘ Ā) J."""
        scaled = isinstance(matrix, sp.MatMul) and not all(
            isinstance(a, sp.MatrixExpr) for a in matrix.args
        )
        if isinstance(matrix, sp.HadamardProduct | sp.MatAdd) or scaled:
            return f"({self._print(matrix)})"
        return self.parenthesize(matrix, PRECEDENCE["Mul"], strict=True)

    def _print_Mul(self, expr: sp.Mul) -> str:
        """Factors side by side, entries in the book's reading order: x[m,i] W_q[i,j]."""
        numerator, denominator = sp.fraction(expr)
        factors = sorted(
            sp.Mul.make_args(numerator),
            key=lambda f: (not f.is_number, L.reading_key(f) if isinstance(f, Indexed) else ()),
        )
        sign = ""
        if factors and factors[0].is_number and factors[0].is_negative:  # -2 j, not (-2) j
            sign, factors = "-", [-factors[0], *factors[1:]]
            factors = factors[1:] if factors[0] == 1 else factors
        top = " ".join(self.parenthesize(f, PRECEDENCE["Mul"], strict=True) for f in factors)
        top = sign + (top or "1")
        if denominator == 1:
            return top
        return f"{top}/{self.parenthesize(denominator, PRECEDENCE['Pow'], strict=True)}"

    def _print_Add(self, expr: sp.Add, order: str | None = None) -> str:
        """Terms in the book's order (x[1,2] before x[1,10]; ω̃ + M), the positive first."""
        if not expr.has(Indexed):
            return super()._print_Add(expr, order)
        text = ""
        for index, term in enumerate(ordered_terms(expr)):
            printed = self._print(term)
            if index == 0:
                text = printed
            elif printed.startswith("-"):
                text += " - " + printed[1:]
            else:
                text += " + " + printed
        return text

    def _print_HadamardProduct(self, expr: sp.HadamardProduct) -> str:
        return " ∘ ".join(self._factor(a) for a in expr.args)

    def _print_MatAdd(self, expr: sp.MatAdd) -> str:
        text = ""
        terms = sorted(expr.args, key=lambda t: (t.could_extract_minus_sign(), str(t) == "M"))
        for index, term in enumerate(terms):
            printed = self._print(term)
            if index == 0:
                text = printed
            elif printed.startswith("-"):
                text += " - " + printed[1:]
            else:
                text += " + " + printed
        return text

    def _print_OneMatrix(self, expr: sp.OneMatrix) -> str:
        return "J"

    def _print_ElementwiseApplyFunction(self, expr) -> str:
        """sin Φ, cos Φ, σ(Z): a function taken entry by entry, as the book writes it (not
        SymPy's ``Lambda(_z, sin(_z)).(Φ)``)."""
        function = expr.function.expr.func
        name = {sp.cos: "cos", sp.sin: "sin"}.get(function)
        if name is not None:
            return f"{name} {self.parenthesize(expr.expr, PRECEDENCE['Pow'], strict=True)}"
        name = {sp.exp: "exp", Sigmoid: "σ"}.get(function, getattr(function, "__name__", "f"))
        return f"{name}({self._print(expr.expr)})"

    def _print_Softmax(self, expr: Softmax) -> str:
        sink = "" if expr.sink is None else f"; {self._print(expr.sink)}"
        return f"softmax({self._print(expr.arg)}{sink})"

    def _print_Concat(self, expr: Concat) -> str:
        block, count = expr.block, self._print(expr.count)
        if isinstance(block, MatrixSymbol):
            letter = self._print(block).removesuffix("⁽ˡ⁾")
            return f"[{letter}⁽¹⁾ … {letter}{_head(count)}]"
        return f"[{self._print(block)}]_(ℓ=1…{count})"

    def _print_MatrixSlice(self, expr: sp.MatrixSlice) -> str:
        (start, stop, _) = expr.colslice
        first = self._print(sp.factor(start) + 1)
        return f"{self._print(expr.parent)}[:, {first}…{self._print(sp.factor(stop))}]"

    def _print_Pow(self, expr: sp.Pow, rational: bool = False) -> str:
        if expr.exp == sp.S.Half:
            return "√" + self.parenthesize(expr.base, PRECEDENCE["Pow"])
        if expr.exp == -sp.S.Half:
            return "1/√" + self.parenthesize(expr.base, PRECEDENCE["Pow"])
        if expr.exp.is_Integer and 1 < expr.exp < 10:  # x², not x**2
            return (
                self.parenthesize(expr.base, PRECEDENCE["Pow"], strict=True)
                + "⁰¹²³⁴⁵⁶⁷⁸⁹"[int(expr.exp)]
            )
        if not expr.exp.is_Integer:  # β^((2 − 2j)/c), not β**((2 − 2j)/c)
            base = self.parenthesize(expr.base, PRECEDENCE["Pow"], strict=True)
            return f"{base}^({self._print(expr.exp)})"
        return super()._print_Pow(expr, rational)

    def _big(self, expr: sp.Sum | sp.Product, symbol: str) -> str:
        """Σ or ∏ with its limits, outermost first, then what it runs over."""
        limits = "".join(
            f"{symbol}_({self._print(v)}={self._print(lo)}…{self._print(hi)}) "
            for v, lo, hi in reversed(expr.limits)
        )
        return limits + self.parenthesize(expr.function, PRECEDENCE["Mul"])

    def _print_Sum(self, expr: sp.Sum) -> str:
        return self._big(expr, "Σ")

    def _print_exp(self, expr: sp.Expr) -> str:
        return f"exp({self._print(expr.args[0])})"

    def _print_Piecewise(self, expr: sp.Piecewise) -> str:
        parts = []
        for value, condition in expr.args:
            if condition is sp.true:
                parts.append(f"{self._print(value)} otherwise")
            else:
                parts.append(f"{self._print(value)} if {self._print(condition)}")
        return "(" + ", ".join(parts) + ")"

    def _print_Indicator(self, expr: sp.Expr) -> str:
        return f"[{self._print(expr.args[0])}]"

    def _print_Abs(self, expr: sp.Expr) -> str:
        return f"|{self._print(expr.args[0])}|"

    def _print_Max(self, expr: sp.Expr) -> str:
        return f"max({', '.join(self._print(a) for a in expr.args)})"

    def _print_Min(self, expr: sp.Expr) -> str:
        return f"min({', '.join(self._print(a) for a in expr.args)})"

    def _print_Entries(self, expr: sp.Expr) -> str:  # a matrix given by its entry
        indices = ",".join(self._print(index) for index in expr.indices)
        return f"[{self._print(expr.entry)}]_({indices})"

    def _print_Product(self, expr: sp.Product) -> str:
        return self._big(expr, "∏")

    def _print_Sigmoid(self, expr: sp.Expr) -> str:
        return f"σ({self._print(expr.args[0])})"

    def _print_Heaviside(self, expr: sp.Expr) -> str:  # θ(0) is the document's convention
        return f"θ({self._print(expr.args[0])})"

    def _print_sign(self, expr: sp.Expr) -> str:
        return f"sign({self._print(expr.args[0])})"

    def _print_Relational(self, expr: sp.Rel) -> str:
        if isinstance(expr, sp.GreaterThan | sp.StrictGreaterThan):
            expr = expr.reversed
        symbol = _RELATIONS.get(expr.rel_op, expr.rel_op)
        return f"{self._print(expr.lhs)} {symbol} {self._print(expr.rhs)}"

    def _print_Equality(self, expr: sp.Eq) -> str:
        return f"{self._print(expr.lhs)} = {self._print(expr.rhs)}"

    def _print_And(self, expr: sp.And) -> str:
        return " and ".join(self.parenthesize(a, PRECEDENCE["And"]) for a in expr.args)

    def _print_NegativeInfinity(self, expr: sp.Expr) -> str:
        return "−∞"

    def _print_Infinity(self, expr: sp.Expr) -> str:
        return "∞"

    def _print_floor(self, expr: sp.Expr) -> str:
        return f"⌊{self._print(expr.args[0])}⌋"

    def _print_Mod(self, expr: sp.Mod) -> str:
        return f"({self._print(expr.args[0])} mod {self._print(expr.args[1])})"


_PRINTER = PlainPrinter()


def plain(expr: sp.Basic) -> str:
    """Plain text of a SymPy object in the book's notation (`PlainPrinter`), every minus sign
    the typographic one (−), as in −∞."""
    return _PRINTER.doprint(expr).replace("-", "−")
