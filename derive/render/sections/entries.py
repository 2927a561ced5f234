"""The explicit matrices entry by entry, for the HTML page's tables: each entry's formula in the
previous steps' entries (printed by `derive.notation.latex`, as the displays print it), the
entries that formula reads (its `Indexed` atoms) and, with the worked example, its value."""

from __future__ import annotations

import math

import sympy as sp
from sympy import Indexed

from ...explicit.forward import ExplicitGraph
from ...notation import latex
from ...notation import letters as L
from .. import prose as P
from ..blocks import Entry, Matrices, Matrix, derived

__all__ = ["matrices", "entry_key", "states"]

#: Values by matrix key ("X", "Omega", "A_2"), rows of floats.
Numbers = dict[str, list[list[float]]]


def entry_key(entry: Indexed) -> str:
    """The name of an entry in a page: ω̃_{2,3} is ``omegatilde-2-3``, ω^{(1)}_{2,3} is
    ``omega-1-2-3``."""
    return "-".join([entry.base.label.name, *(str(int(index)) for index in entry.indices)])


def _value(numbers: Numbers | None, key: str, row: int, col: int) -> float | None:
    if numbers is None or key not in numbers:
        return None
    value = float(numbers[key][row][col])
    return value if math.isfinite(value) else None


def _matrix(
    letter: str,
    role: str,
    key: str,
    entries: sp.MatrixBase,
    formulas,
    numbers,
    seen: tuple[Indexed, ...] = (),
):
    rows = []
    for row in range(entries.rows):
        cells = []
        for col in range(entries.cols):
            entry = entries[row, col]
            formula = None if formulas is None else formulas[row, col]
            atoms = set() if formula is None else formula.atoms(Indexed)
            reads = sorted(atoms | set(seen), key=L.reading_key)
            cells.append(
                Entry(
                    key=entry_key(entry),
                    tex=latex(entry),
                    formula=None if formula is None else latex(formula),
                    reads=tuple(entry_key(read) for read in reads),
                    value=_value(numbers, key, row, col),
                )
            )
        rows.append(tuple(cells))
    return Matrix(letter, role, tuple(rows))


def _fits(ea: ExplicitGraph, numbers: Numbers | None) -> Numbers | None:
    """The numbers, if they are for these sizes (every input's shape matches), else None."""
    if numbers is None:
        return None
    for letter, entries in ea.inputs.items():
        rows = numbers.get(letter)
        if rows is None or (len(rows), len(rows[0])) != entries.shape:
            return None
    return numbers


def matrices(ea: ExplicitGraph, numbers: Numbers | None = None) -> Matrices:
    """Every input and every step of `ea` as a `Matrix` of entries; `numbers` (by matrix key,
    e.g. the worked example's inputs and values) give each entry its value where they are for
    these sizes."""
    numbers = _fits(ea, numbers)
    found = [
        _matrix(
            L.MATRIX_LATEX[letter], L.role(letter) or P.INPUT_ROLE, letter, entries, None, numbers
        )
        for letter, entries in ea.inputs.items()
    ]
    for step in ea.steps:
        key = step.step.output.removesuffix("_l")
        letter, role = L.MATRIX_LATEX[key], L.role(key) or step.step.title or key
        if step.head is not None:
            letter += f"^{{({step.head})}}"
            role += f" (head {step.head})"
        found.append(_matrix(letter, role, step.output, step.entries, step.formula, numbers))
    how = "the declarations at these sizes, entry by entry"
    return Matrices(tuple(found), derived(how, *(step.step.output for step in ea.steps)))


def states(found: list) -> list[Matrix]:
    """An algorithm's state block by block (`derive.proofs.online_softmax.block_states`) as
    matrices of entries: each entry's formula, and what it reads and has seen lit up with it."""
    return [
        _matrix(state.letter, state.role, "", state.entries, state.formulas, None, state.seen)
        for state in found
    ]
