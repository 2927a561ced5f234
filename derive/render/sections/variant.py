"""The document of a variant: its words, the declarations it changes (the steps it shares with
its base are referenced, not repeated), what SymPy derives about it, its backward pass where it
differs, and its explicit matrices."""

from __future__ import annotations

import sympy as sp

from ... import calculus, proofs
from ...graph import Graph
from ...graph.variants import Variant
from ...notation import latex
from ...notation import letters as L
from ...proofs.claims import prove
from .. import prose as P
from .. import prose_variants as PV
from ..blocks import Block, Display, Heading, Prose, declared, derived
from ..lines import equation, fact_lines
from .forward import MATRIX_FORM

__all__ = ["variant_sections"]


def _changed(variant: Variant) -> list[calculus.Step]:
    """The steps whose declaration is not the base graph's, or that the base lacks (a step of
    the same formula over other shapes is the base's: the shapes are listed apart)."""
    base = variant.base
    return [
        step
        for step in calculus.steps(variant.graph)
        if base.producer(step.output) is None or base.step(step.output).element != step.element
    ]


def _shared(variant: Variant, changed: list[calculus.Step]) -> str:
    names = {step.output for step in changed}
    titles = dict.fromkeys(
        s.title.lower() for s in variant.graph.declarations if s.output not in names
    )
    return ", ".join(titles)


def _steps(variant: Variant) -> list[Block]:
    changed = _changed(variant)
    blocks: list[Block] = [Heading("The steps")]
    shared = _shared(variant, changed)
    if not changed:
        blocks.append(Prose(PV.VARIANT_NOTHING_NEW.format(base=variant.base.name)))
    elif shared:
        blocks.append(Prose(PV.VARIANT_SHARED.format(base=variant.base.name, steps=shared)))
    for step in changed:
        blocks += [
            Heading(step.title, 2),
            Display((equation(step.element),), declared(step.output)),
        ]
        if step.matrix is not None:
            blocks.append(Display((equation(step.matrix),), derived(MATRIX_FORM, step.output)))
    return blocks


def _weights(graph: Graph) -> list[Block]:
    """The weights with the declared mask put in, where the graph declares one."""
    if not any(step.constant for step in graph.declarations):
        return []
    element, sources = proofs.weights_element(graph)
    (a,) = [s.element.lhs for s in graph.declarations if s.output in ("A", "A_l")]
    line = equation(sp.Eq(a, element, evaluate=False))
    how = "the mask put into the weights, conditions decided under the index ranges"
    return [Prose(P.CAUSAL_DERIVED), Display((line,), derived(how, *sources))]


def _facts(variant: Variant) -> list[Block]:
    blocks: list[Block] = [Heading("What SymPy derives")]
    rows = proofs.rows_sum_to_one(variant.graph)
    blocks += [Heading(rows.title, 2), Display(fact_lines(rows), derived(rows.how, *rows.sources))]
    for claim in variant.claims:
        fact = prove(variant.graph, claim)
        blocks += [
            Heading(fact.title, 2),
            Prose(PV.CLAIM_TEXT[fact.name]),
            Display(fact_lines(fact), derived(fact.how, *fact.sources)),
        ]
    counted = calculus.operation_count(variant.graph)
    lines = (
        rf"\text{{matrix products}} &= {latex(sp.sympify(counted['matrix products']))}, \qquad "
        rf"\text{{transposes}} = {latex(sp.sympify(counted['transposes']))}",
        rf"\text{{FLOPs}} &= {latex(calculus.flop_count(variant.graph))}",
    )
    how = "counted on the composed matrix expression of C"
    sources = tuple(s.output for s in variant.graph.declarations)
    return blocks + [Prose(PV.VARIANT_COUNT), Display(lines, derived(how, *sources))]


def _backward(variant: Variant) -> list[Block]:
    """The gradients whose matrix form or shape differs from the base graph's."""
    base = {g.output: g for g in calculus.backward(variant.base)}
    shown = [
        g
        for g in calculus.backward(variant.graph)
        if g.output not in base
        or base[g.output].matrix != g.matrix
        or base[g.output].shape != g.shape
    ]
    if not shown:
        return [
            Heading("The backward pass"),
            Prose(PV.VARIANT_SAME_BACKWARD.format(base=variant.base.name)),
        ]
    lines = tuple(line for g in shown for line in (equation(g.matrix), equation(g.element)))
    sources = tuple(dict.fromkeys(p.step.output for g in shown for p in g.contributions))
    how = "reverse mode over the variant's declarations (matrix derivatives, the chain rule)"
    return [
        Heading("The backward pass"),
        Prose(PV.VARIANT_BACKWARD.format(base=variant.base.name)),
        Display(lines, derived(how, *sources)),
    ]


def variant_sections(variant: Variant) -> list[Block]:
    """Every section of a variant's document but the explicit one."""
    shapes = variant.graph.shapes
    rows = ", ".join(
        f"${L.MATRIX_LATEX[letter]}$ (${latex(shapes[letter][0])} \\times "
        f"{latex(shapes[letter][1])}$)"
        for letter in shapes
        if variant.base.shapes.get(letter) != shapes[letter]
    )
    blocks: list[Block] = [Heading(variant.title), Prose(variant.text)]
    if rows:
        blocks.append(Prose(PV.VARIANT_SHAPES.format(shapes=rows)))
    return blocks + _steps(variant) + _weights(variant.graph) + _facts(variant) + _backward(variant)
