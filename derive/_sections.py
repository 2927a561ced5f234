"""The sections of a derivation document, as blocks, from the steps and the facts.

Each function returns the blocks of one section. The mathematics comes from SymPy objects through
`derive._latex`; the words come from `derive._prose`.
"""

from __future__ import annotations

from collections.abc import Callable

import sympy as sp

from . import _facts
from . import _notation as N
from . import _prose as P
from ._blocks import Block, Display, Heading, Prose, Table
from ._explicit import ExplicitAttention, ExplicitStep
from ._latex import AttentionPrinter, latex, split_sum
from ._steps import Step, steps

__all__ = [
    "pipeline",
    "shapes",
    "derivation_steps",
    "facts",
    "counts",
    "causal",
    "multi_head",
    "batches",
    "explicit",
    "explicit_lines",
    "matrix_line",
]

_ORDER = AttentionPrinter()


def _equation(eq: sp.Eq) -> str:
    return f"{latex(eq.lhs)} &= {latex(eq.rhs)}"


def _shape(shape: tuple[sp.Expr, sp.Expr]) -> str:
    return rf"${latex(shape[0])} \times {latex(shape[1])}$"


def pipeline() -> list[Block]:
    return [Heading("From tokens to the input matrix"), Prose(P.PIPELINE)]


def shapes() -> list[Block]:
    """The shapes table, read off the steps' matrix symbols."""
    known: dict[str, tuple[sp.Expr, sp.Expr]] = {}
    for step in steps():
        known |= step.shapes
    rows = tuple(
        (f"${N.MATRIX_LETTERS[letter]}$", _shape(known[letter]), role)
        for letter, role in P.ROLES.items()
    )
    return [Prose(P.SHAPES), Table(("matrix", "shape", "role"), rows)]


def _step_blocks(step: Step) -> list[Block]:
    text = P.STEP_TEXT[(step.name, step.output)]
    return [Prose(text), Display((_equation(step.matrix), _equation(step.element)))]


def derivation_steps() -> list[Block]:
    blocks: list[Block] = [Heading("The steps"), Prose(P.STEPS_INTRO)]
    for step in steps():
        blocks += [Heading(step.title, 2), *_step_blocks(step)]
    return blocks


def _checked(fact: _facts.Fact) -> _facts.Fact:
    if not fact.holds:  # a document never states what SymPy did not prove
        raise RuntimeError(f"fact {fact.name} does not hold: residual {fact.residual}")
    return fact


def facts() -> list[Block]:
    blocks: list[Block] = [Heading("What the steps imply"), Prose(P.FACTS_INTRO)]
    for fact in (_facts.rows_sum_to_one(), _facts.shift_invariance(), _facts.score_variance()):
        _checked(fact)
        lines = _chain((*fact.derivation, fact.statement))
        blocks += [Heading(fact.title, 2), Prose(P.FACT_TEXT[fact.name]), Display(lines)]
    return blocks


def _chain(equations: tuple[sp.Eq, ...]) -> tuple[str, ...]:
    """Equations as a chain: ``a &= b``, then ``&= c`` while each continues the previous one."""
    lines: list[str] = []
    previous: sp.Eq | None = None
    for eq in equations:
        if previous is not None and eq.rhs == previous.rhs:
            continue  # the statement repeats where the derivation already arrived
        continues = previous is not None and eq.lhs in (previous.lhs, previous.rhs)
        lines.append(f"&= {latex(eq.rhs)}" if continues else _equation(eq))
        if not continues:
            previous = eq
        else:
            previous = sp.Eq(previous.lhs, eq.rhs, evaluate=False)
    return tuple(lines)


def counts() -> list[Block]:
    counted = _facts.operation_count()
    c_symbol = N.matrix_symbol("C", N.n, N.c)
    lines = (
        f"{latex(c_symbol)} &= {latex(_facts.composed_expression())}",
        rf"\text{{matrix products}} &= {counted['matrix products']}, \qquad "
        rf"\text{{transposes}} = {counted['transposes']}",
        rf"\text{{FLOPs}} &= {latex(_facts.flop_count())}",
    )
    return [Heading("Five matrix products and one transpose"), Prose(P.COUNT_TEXT), Display(lines)]


def causal() -> list[Block]:
    (weights,) = [s for s in steps(causal=True) if s.name == "weights"]
    (masked,) = [s for s in steps(masked=True) if s.name == "weights"]
    rows = _facts.rows_sum_to_one(causal=True)
    _checked(rows)
    lines = (_equation(weights.element), _equation(masked.matrix), _equation(masked.element))
    return [Heading("Causal attention and masks"), Prose(P.CAUSAL_TEXT), Display(lines)]


def multi_head() -> list[Block]:
    blocks: list[Block] = [Heading("Multi-head attention"), Prose(P.MULTI_HEAD_TEXT)]
    for step in steps(heads=True)[3:]:
        blocks += _step_blocks(step)
    flops = _facts.flop_count(heads=True)
    blocks.append(Display((rf"\text{{FLOPs}} &= {latex(flops)}",)))
    return blocks


def batches() -> list[Block]:
    chain = steps(batch=True)
    shown = [s for s in chain if s.output in ("Q", "Omega", "A", "C")]
    return [
        Heading("Batches"),
        Prose(P.BATCH_TEXT),
        Display(tuple(_equation(s.element) for s in shown)),
    ]


# ---------------------------------------------------------------------------------------------
# Explicit mode


def _long(lhs: str, expr: sp.Expr) -> list[str]:
    """``lhs &= t1 + t2 + …`` broken into lines of about 70 characters of source."""
    if expr.is_Add:
        terms = [latex(term, fold_short_frac=True) for term in _ORDER._as_ordered_terms(expr)]
    else:
        terms = [latex(expr, fold_short_frac=True)]
    terms = [f"\\left({t}\\right)" if t.startswith("-") and k else t for k, t in enumerate(terms)]
    lines = split_sum(terms)
    return [f"{lhs} &= {lines[0]}"] + [rf"&\quad + {line}" for line in lines[1:]]


def _entries_lines(step: ExplicitStep) -> list[str]:
    lines: list[str] = []
    rows, cols = step.formula.shape
    for row in range(rows):
        for col in range(cols):
            lines += _long(latex(step.entries[row, col]), step.formula[row, col])
    return lines


def _weights_lines(step: ExplicitStep) -> list[str]:
    """Per row: the shared denominator s_m once, then each a_{m,p} over s_m."""
    lines: list[str] = []
    s = sp.IndexedBase("s")
    for row in range(step.formula.shape[0]):
        entries = [step.formula[row, col] for col in range(step.formula.shape[1])]
        nonzero = [entry for entry in entries if entry != 0]
        total = sp.fraction(nonzero[0])[1] if nonzero else sp.S.Zero
        if total != 1 and total != 0:
            lines += _long(latex(s[row + 1]), total)
        for col, entry in enumerate(entries):
            lhs = latex(step.entries[row, col])
            numerator, denominator = sp.fraction(entry)
            if denominator == total and total not in (0, 1):
                lines.append(rf"{lhs} &= \frac{{{latex(numerator)}}}{{{latex(s[row + 1])}}}")
            else:
                lines.append(f"{lhs} &= {latex(entry)}")
    return lines


def explicit_lines(step: ExplicitStep) -> list[str]:
    """The aligned lines of one explicit step (weights: with the shared row sums s_m)."""
    return _weights_lines(step) if step.name == "weights" else _entries_lines(step)


#: Wider matrices are shown by their generic entry, so that no display runs off the page.
WIDEST_MATRIX = 8


def matrix_line(letter: str, matrix: sp.MatrixBase) -> str:
    rows, cols = matrix.shape
    if cols <= WIDEST_MATRIX:
        return f"{letter} &= {latex(matrix)}"
    entry = matrix[0, 0]  # base[1, 1]: the same letter with the generic indices
    first, second = (N.i, N.j) if entry.base.label.name.startswith("w") else (N.m, N.i)
    generic = latex(entry.base[first, second])
    return (
        rf"{letter} &= \left({generic}\right)_{{{latex(first)} = 1 \ldots {rows},\;"
        rf" {latex(second)} = 1 \ldots {cols}}}"
    )


def explicit(ea: ExplicitAttention, progress: Callable[[str], None] | None = None) -> list[Block]:
    """Every step at the sizes of `ea`, entry by entry, each in the previous step's entries."""
    sizes = f"$n = {ea.n}$, $d = {ea.d}$, $c = {ea.c}$"
    if ea.heads > 1:
        sizes += f", $h = {ea.heads}$ heads of width $c_h = {ea.width}$"
    if ea.causal:
        sizes += ", causal"
    blocks: list[Block] = [
        Heading(f"Explicit: {sizes}"),
        Prose(P.EXPLICIT_INTRO),
        Display(tuple(matrix_line(N.MATRIX_LETTERS[k], v) for k, v in ea.inputs.items())),
    ]
    for index, step in enumerate(ea.steps, 1):
        if progress is not None:
            progress(f"explicit step {index}/{len(ea.steps)}: {step.output}")
        head = f" (head {step.head})" if step.head is not None else ""
        blocks.append(Heading(f"{step.step.title}{head}", 2))
        if step.name == "weights":
            blocks.append(Prose(P.EXPLICIT_ROW_SUM))
        blocks.append(Display(tuple(explicit_lines(step))))
    return blocks
