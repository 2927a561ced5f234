"""The lines an explicit step shows: one per entry, long sums broken (`derive.notation.lines`),
the softmax's row sums written once as D_m. Objects use them for their rich display; documents
for their sections. A step is anything with `entries`, `formula` and `name` (`ExplicitStep`,
`GradientStep`)."""

from __future__ import annotations

import sympy as sp

from ..notation import latex
from ..notation import letters as L
from ..notation.lines import sum_lines

__all__ = ["explicit_lines", "matrix_line", "shares_row_sums", "WIDEST_MATRIX"]

#: Wider matrices are shown by their generic entry, so that no display runs off the page.
WIDEST_MATRIX = 8


def _entries_lines(step) -> list[str]:
    lines: list[str] = []
    rows, cols = step.formula.shape
    for row in range(rows):
        for col in range(cols):
            lines += sum_lines(latex(step.entries[row, col]), step.formula[row, col])
    return lines


def _weights_lines(step) -> list[str]:
    """Per row: the shared denominator D_m once, then each a_{m,p} over D_m."""
    lines: list[str] = []
    total_of = sp.IndexedBase("D")  # the row's denominator (s is the number of keys)
    for row in range(step.formula.shape[0]):
        entries = [step.formula[row, col] for col in range(step.formula.shape[1])]
        nonzero = [entry for entry in entries if entry != 0]
        total = sp.fraction(nonzero[0])[1] if nonzero else sp.S.Zero
        if total != 1 and total != 0:
            lines += sum_lines(latex(total_of[row + 1]), total)
        for col, entry in enumerate(entries):
            lhs = latex(step.entries[row, col])
            numerator, denominator = sp.fraction(entry)
            if denominator == total and total not in (0, 1):
                lines.append(rf"{lhs} &= \frac{{{latex(numerator)}}}{{{latex(total_of[row + 1])}}}")
            else:
                lines.append(f"{lhs} &= {latex(entry)}")
    return lines


def shares_row_sums(step) -> bool:
    """True for a step whose entries are quotients over their row's one sum (the softmax's
    weights): shown with the sum written once per row as D_m."""
    for row in range(step.formula.shape[0]):
        nonzero = [entry for entry in step.formula.row(row) if entry != 0]
        below = {sp.fraction(entry)[1] for entry in nonzero}
        if len(below) == 1 and below.pop().is_Add:
            return True
    return False


def explicit_lines(step) -> list[str]:
    """The aligned lines of one explicit step (the weights: with the shared row sums D_m)."""
    return _weights_lines(step) if shares_row_sums(step) else _entries_lines(step)


def matrix_line(letter: str, matrix: sp.MatrixBase) -> str:
    """``X &= (matrix of named entries)``, or its generic entry when wider than 8 columns."""
    rows, cols = matrix.shape
    if cols <= WIDEST_MATRIX:
        return f"{letter} &= {latex(matrix)}"
    entry = matrix[0, 0]  # base[1, 1]: the same letter with the generic indices
    first, second = (L.i, L.j) if entry.base.label.name.startswith("w") else (L.m, L.i)
    generic = latex(entry.base[first, second])
    return (
        rf"{letter} &= \left({generic}\right)_{{{latex(first)} = 1 \ldots {rows},\;"
        rf" {latex(second)} = 1 \ldots {cols}}}"
    )
