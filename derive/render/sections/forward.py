"""The forward sections of a document: the pipeline, the shapes, the steps, the facts, the
counts. The mathematics comes from the graph's declarations and what SymPy derives from them."""

from __future__ import annotations

import sympy as sp

from ... import calculus, proofs
from ...graph import Graph
from ...graph.assumptions import ASSUMPTIONS
from ...notation import latex
from ...notation import letters as L
from .. import prose as P
from ..blocks import Block, Display, Heading, Prose, Table, declared, derived
from ..lines import equation, fact_lines, shape

__all__ = ["pipeline", "shapes", "derivation_steps", "facts", "counts", "MATRIX_FORM"]

#: How a matrix form was derived, in the documents' provenance comments.
MATRIX_FORM = "matrix_form of the declared entry (SymPy's index-to-matrix conversion)"
_ALL = ("Q", "K", "V", "Omega", "Omega_scaled", "A", "C")


def pipeline() -> list[Block]:
    return [Heading("From tokens to the input matrix"), Prose(P.PIPELINE), Prose(P.READING)]


def shapes(graph: Graph) -> list[Block]:
    """The shapes table, read off the declarations."""
    known = graph.shapes
    rows = tuple(
        (f"${L.MATRIX_LATEX[letter]}$", shape(known[letter]), role)
        for letter, role in P.ROLES.items()
    )
    return [Prose(P.SHAPES), Table(("matrix", "shape", "role"), rows)]


def _composed_weights(graph: Graph, step: calculus.Step) -> Display:
    """a_{m,p} with the scaled scores put in: the book's exp(ω_{m,p}/√c) / Σ_r exp(ω_{m,r}/√c)."""
    (source,) = step.declaration.inputs
    element = calculus.inline(step.element.rhs, graph, {source})
    producer = {s.output: s for s in calculus.steps(graph)}[source]
    matrix = step.matrix.rhs.xreplace({producer.matrix.lhs: producer.matrix.rhs})
    lines = (
        f"{latex(step.element.lhs)} &= {latex(element)}",
        f"{latex(step.matrix.lhs)} &= {latex(matrix)}",
    )
    return Display(lines, derived("the scaled scores' declaration put in", step.output, source))


def derivation_steps(graph: Graph) -> list[Block]:
    blocks: list[Block] = [Heading("The steps"), Prose(P.STEPS_INTRO)]
    for step in calculus.steps(graph):
        blocks += [
            Heading(step.title, 2),
            Prose(P.STEP_TEXT[(step.name, step.output)]),
            Display((equation(step.element),), declared(step.output)),
            Display((equation(step.matrix),), derived(MATRIX_FORM, step.output)),
        ]
        if step.name == "weights":
            blocks += [Prose(P.COMPOSED_WEIGHTS), _composed_weights(graph, step)]
    return blocks


def _fact(fact: proofs.Fact, text: str) -> list[Block]:
    return [Prose(text), Display(fact_lines(fact), derived(fact.how, *fact.sources))]


def _assumptions() -> Display:
    lines = tuple(
        rf"{latex(moment)} &= {latex(symbol)} = {latex(value)}"
        for moment, symbol, value in ASSUMPTIONS.rows()
    )
    return Display(lines, declared("assumptions"))


def facts(graph: Graph) -> list[Block]:
    rows, shift, variance, scaled = proofs.facts(graph)
    return [
        Heading("What the steps imply"),
        Prose(P.FACTS_INTRO),
        Heading(rows.title, 2),
        *_fact(rows, P.FACT_TEXT["rows_sum_to_one"]),
        Heading(shift.title, 2),
        *_fact(shift, P.FACT_TEXT["shift_invariance"]),
        Heading("Why the scores are scaled", 2),
        Prose(P.FACT_TEXT["assumptions"]),
        _assumptions(),
        *_fact(variance, P.FACT_TEXT["score_variance"]),
        *_fact(scaled, P.FACT_TEXT["scaled_score_variance"]),
    ]


def counts(graph: Graph) -> list[Block]:
    """The composed expression of C, its matrix products and transposes, its FLOPs."""
    counted = calculus.operation_count(graph)
    output = graph.output
    c_symbol = L.matrix_symbol(output, *graph.shapes[output])
    sources = tuple(s.output for s in graph.declarations)
    lines = (
        f"{latex(c_symbol)} &= {latex(calculus.composed_expression(graph))}",
        rf"\text{{matrix products}} &= {latex(sp.sympify(counted['matrix products']))}, \qquad "
        rf"\text{{transposes}} = {latex(sp.sympify(counted['transposes']))}",
        rf"\text{{FLOPs}} &= {latex(calculus.flop_count(graph))}",
    )
    how = "each step's matrix form put into the next; products, transposes and FLOPs counted on it"
    return [
        Heading("Five matrix products and one transpose"),
        Prose(P.COUNT_TEXT),
        Display(lines, derived(how, *sources)),
    ]
