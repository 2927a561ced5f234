"""A graph at concrete sizes: each declaration instantiated entry by entry.

Every entry of every step is its declared formula at concrete indices and sizes, the finite sums
expanded (``doit``): ω_{2,3} = q_{2,1} k_{3,1} + q_{2,2} k_{3,2} at c = 2, and ω̃_{2,3} =
ω_{2,3}/√2. The formulas stay in the named entries of the steps they read (never one expanded
expression in x and the weights).

A step whose every entry is a copy of an earlier entry or a number (the causal mask, the masked
scores ω̂ = ω̃ + M once M is 0 or −∞, the split into heads, the concatenation) is folded into the
steps that read it: a masked weight is then exp(−∞) = 0. A row of weights with no key left
divides 0 by 0; by the convention of `attention.functional.weights` its weights are 0.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import sympy as sp
from sympy import ImmutableMatrix, Indexed

from ..calculus import Step, steps
from ..graph import Graph
from ..notation import letters as L

__all__ = ["ExplicitStep", "instantiate", "key_of", "cells", "value_at", "Instance"]


@dataclass(frozen=True)
class ExplicitStep:
    """One step at concrete sizes.

    Attributes:
        step: the generic step it instantiates (name, title, declaration, matrix form).
        output: the key of its value (``"Q"``, ``"Omega"``, or per head ``"Omega_2"``).
        head: the head (1-based) for per-head steps, else None.
        entries: the matrix of its output's named entries (the left-hand sides).
        formula: each entry in terms of the previous steps' named entries.
        polynomial: True when every entry is a polynomial with rational coefficients in
            entries of inputs and polynomial steps (projections, scores): exact over the
            rationals, whatever `digits` asks for.
    """

    step: Step
    output: str
    head: int | None
    entries: ImmutableMatrix
    formula: ImmutableMatrix
    polynomial: bool

    @property
    def name(self) -> str:
        return self.step.name

    def _repr_latex_(self) -> str:
        from .display import explicit_lines

        return "$$\\begin{aligned}" + " \\\\ ".join(explicit_lines(self)) + "\\end{aligned}$$"


def key_of(letter: str, head: int | None) -> str:
    """The key of a step's value: ``Omega_l`` at head 2 is ``Omega_2``."""
    return letter if head is None else f"{letter.removesuffix('_l')}_{head}"


def _structural(step: Step, constants: set[str]) -> bool:
    """A step that computes nothing: a constant (the causal mask), a copy of another entry (the
    split into heads, the concatenation), or a copy plus a constant (the masked scores)."""
    declaration = step.declaration
    if declaration.constant:
        return True
    terms = sp.Add.make_args(declaration.element.rhs)
    if not all(isinstance(term, Indexed) for term in terms):
        return False
    computed = [term for term in terms if L.letter_of(term) not in constants]
    return len(computed) == 1


def _rational_polynomial(value: sp.Expr) -> bool:
    """Whether float64 computes the step exactly from dyadic inputs: a polynomial in the
    entries whose coefficients are rationals a float holds (denominators powers of 2: not
    cos(1) q_{1,1}, nor q_{1,1}/12, a scale 1/√144)."""
    gens = sorted(value.atoms(Indexed), key=sp.default_sort_key)
    if not gens:
        return float_exact(value)
    if not value.is_polynomial(*gens):
        return False
    if any(power.exp.is_Rational and not power.exp.is_Integer for power in value.atoms(sp.Pow)):
        return False
    return all(float_exact(c) for c in sp.Poly(value, *gens).coeffs())


def float_exact(value: sp.Expr) -> bool:
    """Whether `value` is a rational a float holds exactly (its denominator a power of 2)."""
    return bool(value.is_Rational) and int(value.q) & (int(value.q) - 1) == 0


def _cells(step: Step, sizes: dict, heads: int, known: dict | None = None):
    """(head, lhs entry, formula) for every entry of a step, at concrete sizes."""
    declaration = step.declaration
    return cells(declaration.element, declaration.shapes[declaration.output], sizes, heads, known)


def cells(element: sp.Eq, shape: tuple, sizes: dict, heads: int, known: dict | None = None):
    """(head, lhs entry, value) for every entry of an element-wise equation at concrete sizes:
    its row index over the shape's rows, the head ℓ over 1 … heads, and its column index over
    the columns (or, where the column is (ℓ − 1) c_h + j, j over 1 … c_h). Entries in `known`
    are put in as the formula is built (before SymPy simplifies exp(s)/exp(s) to 1)."""
    lhs, rhs = element.lhs, element.rhs
    indices = lhs.indices[1:] if len(lhs.indices) == 3 else lhs.indices
    symbols = sorted(
        {s for index in lhs.indices for s in sp.sympify(index).free_symbols} - set(L.SIZES),
        key=str,
    )
    rows, cols = (int(sp.sympify(x).xreplace(sizes)) for x in shape)
    ranges = []
    for symbol in symbols:
        if symbol == L.ell:
            ranges.append(range(1, heads + 1))
        elif symbol == L.nu:  # a group's block of columns: ν = 1 … g
            ranges.append(range(1, cols // int(sizes[L.c_h]) + 1))
        elif symbol == indices[0]:
            ranges.append(range(1, rows + 1))
        else:
            width = cols if symbol == indices[1] else int(sizes[L.c_h])
            ranges.append(range(1, width + 1))
    numbers = {size: int(value) for size, value in sizes.items() if sp.sympify(value).is_Integer}
    for values in itertools.product(*ranges):
        at = dict(zip(symbols, values, strict=True)) | numbers
        head = at.get(L.ell) if L.ell in symbols else None
        yield head, value_at(lhs, at, sizes), value_at(rhs, at, sizes, known)


_ENTRIES: dict[tuple, Indexed] = {}


def _entry(base: sp.IndexedBase, indices: tuple[int, ...]) -> Indexed:
    """One named entry at integer indices, created once (SymPy's `Indexed` is slow to build)."""
    key = (base.label.name, indices)
    if key not in _ENTRIES:
        _ENTRIES[key] = base[indices]
    return _ENTRIES[key]


def _int(index: sp.Expr, at: dict) -> int:
    """An index expression ((ℓ − 1) c_h + j) at integer values of its symbols."""
    if index.is_Symbol:
        return at[index]
    if index.is_Integer:
        return int(index)
    if isinstance(index, sp.floor):  # a group's block: ⌊(ℓ − 1) g / h⌋
        return int(sp.floor(index.args[0].xreplace({k: sp.Integer(v) for k, v in at.items()})))
    if index.is_Add and all(arg.is_Integer or arg.is_Symbol or arg.is_Mul for arg in index.args):
        return sum(_int(arg, at) for arg in index.args)
    if index.is_Mul and all(arg.is_Integer or arg.is_Symbol for arg in index.args):
        value = 1
        for arg in index.args:
            value *= _int(arg, at)
        return value
    value = sp.sympify(index).xreplace({k: sp.Integer(v) for k, v in at.items()})
    if not value.is_Integer:  # h ν / g and the like: an integer once the sizes are in
        raise ValueError(f"index {index} is not an integer expression (at {at})")
    return int(value)


def value_at(expr: sp.Expr, at: dict, sizes: dict, known: dict | None = None) -> sp.Expr:
    """`expr` at integer indices and concrete sizes, every finite sum written out term by term
    (a direct walk of the formula: much faster than ``xreplace`` then ``doit``)."""
    if isinstance(expr, Indexed):
        entry = _entry(expr.base, tuple(_int(k, at) for k in expr.indices))
        return known.get(entry, entry) if known else entry
    if expr.is_Symbol:
        return sp.Integer(at[expr]) if expr in at and expr not in sizes else sizes.get(expr, expr)
    if isinstance(expr, sp.Sum | sp.Product):  # written out: a sum, or a product, of terms
        terms = [({**at}, expr.function)]
        for variable, low, high in reversed(expr.limits):  # the outermost first: an inner
            # sum's limits may read an outer index (Σ_{m'} Σ_{ℓ=t+1}^{m'})
            terms = [
                ({**where, variable: k}, function)
                for where, function in terms
                for k in range(_int(low, where), _int(high, where) + 1)
            ]
        values = [value_at(function, where, sizes, known) for where, function in terms]
        return sp.Add(*values) if isinstance(expr, sp.Sum) else sp.Mul(*values)
    if not expr.args:
        return expr
    return expr.func(*[value_at(arg, at, sizes, known) for arg in expr.args])


def _fixed(value: sp.Expr) -> sp.Expr:
    """0 for a quotient 0/0 (a row with no key left), else the value."""
    return sp.S.Zero if value is sp.nan else value


@dataclass(frozen=True)
class Instance:
    """A graph at concrete sizes: its steps, and the entries folded away (entry -> value)."""

    steps: tuple[ExplicitStep, ...]
    folded: dict[Indexed, sp.Expr]
    folded_letters: frozenset[str]


def instantiate(
    graph: Graph, sizes: dict[sp.Symbol, int], heads: int, given: dict[Indexed, sp.Expr]
) -> Instance:
    """Every step of `graph` at `sizes` (``{n: 3, d: 4, c: 2, h: 1, c_h: 2}``), with the
    entries of `given` (a mask's: 0 or −∞) put in; folded steps are left out of the result."""
    folded: dict[Indexed, sp.Expr] = dict(given)
    folded_letters: set[str] = set()
    constants = {s.output for s in graph.declarations if s.constant} | {"M"}
    polynomial = set(graph.inputs) - {"M"}
    built: list[ExplicitStep] = []
    last = graph.output
    for step in steps(graph):
        table: dict[int | None, dict[Indexed, sp.Expr]] = {}
        reads_folded = any(
            graph.producer(x) is None and x == "M" or x in folded_letters
            for x in step.declaration.inputs
        )
        for head, entry, formula in _cells(step, sizes, heads, folded if reads_folded else None):
            table.setdefault(head, {})[entry] = _fixed(formula)
        every = [value for cell in table.values() for value in cell.values()]
        if step.output != last and _structural(step, constants):
            for cell in table.values():
                folded.update(cell)
            folded_letters.add(step.output)
            copies = [v for v in every if isinstance(v, Indexed)]
            if all(L.letter_of(v) in polynomial for v in copies):
                polynomial.add(step.output)
            continue
        reads_polynomial = all(letter in polynomial for letter in step.declaration.inputs)
        formulas = [value for value in every if not value.is_number] or every
        exact = reads_polynomial and all(_rational_polynomial(v) for v in set(formulas))
        if exact:
            polynomial.add(step.output)
        for head, cell in table.items():
            built.append(_explicit(step, head if heads > 1 else None, cell, exact))
    return Instance(tuple(built), folded, frozenset(folded_letters))


def _explicit(step: Step, head: int | None, cell: dict, exact: bool) -> ExplicitStep:
    ordered = sorted(cell, key=lambda e: tuple(int(k) for k in e.indices))
    rows = max(int(e.indices[-2]) for e in ordered)
    cols = max(int(e.indices[-1]) for e in ordered)
    entries = ImmutableMatrix(rows, cols, ordered)
    formula = ImmutableMatrix(rows, cols, [cell[e] for e in ordered])
    return ExplicitStep(step, key_of(step.output, head), head, entries, formula, exact)
