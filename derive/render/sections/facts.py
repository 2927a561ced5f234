"""What SymPy derives about an entry, and what it costs: its claims (each proved at its stage),
the count of matrix products and FLOPs on its composed expression, and the batch form of its
declarations."""

from __future__ import annotations

import sympy as sp
from sympy import Indexed

from ... import calculus
from ...graph import Entry, Graph
from ...notation import latex
from ...notation import letters as L
from ...notation.lines import WIDEST_LINE, equation, visible_width
from .. import prose_variants as PV
from ..blocks import Block, Display, Heading, Prose, derived
from .common import claim_blocks

__all__ = ["facts", "counts", "batches", "batched"]

_WORDS = (
    "no",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
)


def facts(entry: Entry) -> list[Block]:
    """Each claim of the entry, with its words, proved at its stage."""
    if not entry.claims:
        return []
    intro = entry.document.words("facts")
    blocks: list[Block] = [Heading(entry.document.words("facts heading", PV.FACTS_HEADING))]
    blocks += [Prose(intro)] if intro else []
    for claim, stage in entry.claims:
        blocks += claim_blocks(claim, stage)
    return blocks


def _counted(number: object, noun: str) -> str | None:
    if not (isinstance(number, int) and 0 <= number < len(_WORDS)):
        return None
    return f"{_WORDS[number]} {noun}{'' if number == 1 else 's'}"


def counts(entry: Entry) -> list[Block]:
    """The composed expression of C (where it fits on half a line), its matrix products and
    transposes, its FLOPs."""
    graph = entry.graph
    counted = calculus.operation_count(graph)
    products = _counted(counted["matrix products"], "matrix product")
    transposes = _counted(counted["transposes"], "transpose")
    heading = f"{products} and {transposes}" if products and transposes else PV.COUNTS_HEADING
    heading = heading[0].upper() + heading[1:]
    output = graph.output
    composed = (
        f"{latex(L.matrix_symbol(output, *graph.shapes[output]))} &= "
        f"{latex(calculus.composed_expression(graph))}"
    )
    # a matrix expression has no place to break, and its fractions and brackets print wider
    # than their characters: shown where it takes at most half a line
    lines = (
        *((composed,) if visible_width(composed) <= WIDEST_LINE // 2 else ()),
        rf"\text{{matrix products}} &= {latex(sp.sympify(counted['matrix products']))}, \qquad "
        rf"\text{{transposes}} = {latex(sp.sympify(counted['transposes']))}",
        rf"\text{{FLOPs}} &= {latex(calculus.flop_count(graph))}",
    )
    how = "each step's matrix form put into the next; products, transposes and FLOPs counted on it"
    sources = tuple(s.output for s in graph.declarations)
    return [
        Heading(heading),
        Prose(entry.document.words("counts", PV.VARIANT_COUNT)),
        Display(lines, derived(how, *sources)),
    ]


def _per_sequence(entry: sp.Basic) -> bool:
    """An entry of a matrix that belongs to one sequence of a batch: one whose rows are tokens
    (X, Q, Ω, A, C; the weights are shared by all)."""
    if not isinstance(entry, Indexed):
        return False
    record = L.LETTERS.get(entry.base.label.name)
    rows = record.indices[0] if record is not None and record.indices else None
    return rows in (L.m, L.p)


def batched(eq: sp.Eq) -> sp.Eq:
    """An equation for sequence b of a batch: each per-sequence entry gains the index b first
    (x_{b,m,i}, q_{b,m,j}, …); the weights keep their two indices."""
    return eq.replace(_per_sequence, lambda e: e.base[(L.b, *e.indices)])


def batches(entry: Entry) -> list[Block]:
    """The queries, scores, weights and context of sequence b of a batch."""
    graph: Graph = entry.graph
    shown = [s for s in calculus.steps(graph) if s.output in ("Q", "Omega", "A", "C")]
    lines = tuple(equation(batched(s.element)) for s in shown)
    how = "each declaration with the batch index b given to every per-sequence entry"
    return [
        Heading("Batches"),
        Prose(entry.document.words("batches", PV.BATCH_TEXT)),
        Display(lines, derived(how, *(s.output for s in shown))),
    ]
