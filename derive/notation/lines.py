r"""Line breaking, in one place beside the printer: how wide a formula prints, where it may
break, and how its pieces are packed into lines.

- `visible_width`: about how many characters a LaTeX formula shows (``\left``, braces and
  marks count 0; ``\exp``, ``\cos`` … their letters; the words of ``\text{…}`` as they read;
  a sign between terms one more, for its spacing);
- `packed`: pieces of LaTeX grouped into lines of about a given width, in order;
- `equation`, `chain`: aligned lines (``lhs &= rhs``) from SymPy equations; a line wider than
  the page (about `WIDEST_LINE` visible characters at 11 pt with the documents' margins) is
  broken where the formula allows it: between the terms of a sum, between the factors of a
  product, inside the bracket of a sum sign (``\sum_j \Bigl( … \\ … \Bigr)``), and a long
  left-hand side gets a line of its own; continuation lines are indented with ``\quad``;
- `sum_lines`: the entry of an explicit matrix, a long sum of terms in lines of about
  `EXPLICIT_WIDTH` characters (the explicit sections' displays).
"""

from __future__ import annotations

import re

import sympy as sp

from .printer import latex, ordered_terms, term_key

__all__ = [
    "visible_width",
    "packed",
    "equation",
    "chain",
    "sum_lines",
    "WIDEST_LINE",
    "EXPLICIT_WIDTH",
]

_RELATION = {"==": "=", "<=": r"\le", "<": "<", ">=": r"\ge", ">": ">"}

#: Past this many visible characters a line is broken (the widest line of the self-attention
#: derivation has 95 and fits; the documents' text is about 96 characters of formula wide).
WIDEST_LINE = 96
#: The broken pieces are packed into lines of about this many visible characters.
_PACKED = 72
#: A left-hand side wider than this goes on a line of its own when its line is broken.
_WIDEST_LHS = 30
_BREAK = " \\\\\n&\\quad "
#: The lines of an explicit entry's sum, in visible characters.
EXPLICIT_WIDTH = 56


def visible_width(tex: str) -> int:
    """About how many characters a LaTeX formula shows (\\left, braces, marks: 0; \\exp, \\cos,
    \\tanh …: their letters; the words of \\text{…} with their spaces)."""
    spaced = tex
    for _ in range(3):  # a sign between terms is spaced as about one more character; not in
        spaced = re.sub(r"[_^]\{[^{}]*\}", "", spaced)  # a subscript, where TeX spaces none
    signs = len(re.findall(r" [+\-] ", spaced))
    tex = re.sub(r"\\text\{([^{}]*)\}", lambda t: t[1].replace(" ", "x"), tex)
    tex = re.sub(r"\\(left|right)\b", "", tex)
    tex = re.sub(r"\\(exp|log|cos|sin|tanh|tan|max|min)\b", lambda t: t[1], tex)  # as they read
    tex = re.sub(r"\\[a-zA-Z]+", "x", tex)
    return len(re.sub(r"[{}^_\s]", "", tex)) + signs


def packed(pieces: list[str], width: int) -> list[list[str]]:
    """Group pieces of LaTeX into lines of about `width` visible characters, in order (a piece
    wider than `width` gets a line of its own)."""
    lines: list[list[str]] = [[]]
    length = 0
    for piece in pieces:
        size = visible_width(piece) + 1
        if lines[-1] and length + size > width:
            lines.append([])
            length = 0
        lines[-1].append(piece)
        length += size
    return lines


def _bracketed(pieces: list[str]) -> list[str]:
    """Pieces of a sum or product that spans lines, in brackets that need not pair per line."""
    return [r"\Bigl(" + pieces[0], *pieces[1:-1], pieces[-1] + r"\Bigr)"]


def _pieces(expr: sp.Expr) -> list[str]:
    """The LaTeX of `expr` in pieces between which a line may break."""
    text = latex(expr)
    if visible_width(text) <= _PACKED or isinstance(expr, sp.MatrixBase | sp.MatrixExpr):
        return [text]
    if isinstance(expr, sp.Sum) and len(expr.limits) == 1:
        inner = _pieces(expr.function)
        if len(inner) > 1:
            sign = latex(sp.Sum(sp.Symbol("BODY"), expr.limits[0])).replace("BODY", "").strip()
            bracketed = _bracketed(inner)
            return [f"{sign} {bracketed[0]}", *bracketed[1:]]
    if isinstance(expr, sp.Add):
        pieces: list[str] = []
        for index, term in enumerate(ordered_terms(expr)):
            negative = term.could_extract_minus_sign()
            part = _pieces(-term if negative else term)
            sign = "-" if negative else "+" if index else ""
            pieces += [f"{sign} {part[0]}".strip(), *part[1:]]
        return pieces
    if isinstance(expr, sp.Mul):
        coefficient, factors = expr.as_coeff_mul()
        if coefficient == 1 and not any(factor.is_number for factor in factors):
            plain = [latex(f) for f in factors if not isinstance(f, sp.Add)]
            sums = sorted((f for f in factors if isinstance(f, sp.Add)), key=term_key)
            pieces = [" ".join(plain)] if plain else []
            for factor in sums:
                part = _pieces(factor)
                pieces += [rf"\left({part[0]}\right)"] if len(part) == 1 else _bracketed(part)
            return pieces
    return [text]


def _relation(lhs: str, relation: str, rhs: sp.Expr, indent: int = 0) -> str:
    """``lhs &= rhs``, broken into lines where it is wider than the page; `indent`: the visible
    width before the ``&`` where `lhs` is not printed (a chain's continuation line is aligned
    after the first line's left-hand side, and is that much wider on the page)."""
    right = latex(rhs)
    if indent + visible_width(lhs) + visible_width(right) <= WIDEST_LINE:
        return f"{lhs} &{relation} {right}".lstrip()
    lines = [" ".join(line) for line in packed(_pieces(rhs), _PACKED)]
    if visible_width(lhs) > _WIDEST_LHS:
        return f"& {lhs} \\\\\n&{relation} " + _BREAK.join(lines)
    return f"{lhs} &{relation} ".lstrip() + _BREAK.join(lines)


def equation(eq: sp.Eq) -> str:
    r"""``lhs &= rhs`` (``&\le`` for an inequality), on several lines where it is too wide."""
    return _relation(latex(eq.lhs), _RELATION[eq.rel_op], eq.rhs)


def chain(equations: tuple[sp.Eq, ...]) -> tuple[str, ...]:
    """Equations as a chain: ``a &= b``, then ``&= c`` while each continues the previous one
    (same left-hand side, or the previous right-hand side); a repeated value is left out."""
    lines: list[str] = []
    lhs: sp.Expr | None = None
    last: sp.Expr | None = None
    indent = 0  # the first line's left-hand side, which the continuation lines are aligned after
    for eq in equations:
        if lhs is not None and eq.lhs in (lhs, last):
            if eq.rhs != last:
                lines.append(_relation("", _RELATION[eq.rel_op], eq.rhs, indent))
                last = eq.rhs
            continue
        lines.append(equation(eq))
        lhs, last = eq.lhs, eq.rhs
        width = visible_width(latex(eq.lhs))
        indent = width if width <= _WIDEST_LHS else 0  # a long one has a line of its own
    return tuple(lines)


def sum_lines(lhs: str, expr: sp.Expr) -> list[str]:
    """``lhs &= t1 + t2 + …`` broken into lines of about `EXPLICIT_WIDTH` visible characters
    (the explicit sections: one entry, its terms in reading order)."""
    terms = [latex(term, fold_short_frac=True) for term in ordered_terms(expr)]
    terms = [f"\\left({t}\\right)" if t.startswith("-") and k else t for k, t in enumerate(terms)]
    lines = [" + ".join(line) for line in packed(terms, EXPLICIT_WIDTH)]
    return [f"{lhs} &= {lines[0]}"] + [rf"&\quad + {line}" for line in lines[1:]]
