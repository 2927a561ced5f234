"""The steps of a document: each step the entry declares (all of them where it has no base;
else those whose declaration differs from its base's, the others referenced), declared, with
its matrix form derived; then, where the graph declares a mask, the weights with the mask put
in."""

from __future__ import annotations

import sympy as sp

from ... import calculus, proofs
from ...graph import Entry, Graph
from ...notation import latex
from ...notation import letters as L
from ...notation.lines import equation
from .. import prose as P
from .. import prose_variants as PV
from ..blocks import Block, Display, Heading, Prose, declared, derived
from .common import MATRIX_FORM

__all__ = ["steps"]


def _changed(entry: Entry) -> list[calculus.Step]:
    """The steps whose declaration is not the base's, or that the base lacks (a step of the same
    formula over other shapes is the base's: the shapes are listed apart)."""
    base = entry.base
    return [
        step
        for step in calculus.steps(entry.graph)
        if base is None
        or base.producer(step.output) is None
        or base.step(step.output).element != step.element
    ]


def _intro(entry: Entry, changed: list[calculus.Step]) -> str:
    if entry.base is None:
        return entry.document.words("steps", "")
    names = {step.output for step in changed}
    shared = ", ".join(
        dict.fromkeys(s.title.lower() for s in entry.graph.declarations if s.output not in names)
    )
    if not changed:
        return PV.VARIANT_NOTHING_NEW.format(base=entry.base.name)
    return PV.VARIANT_SHARED.format(base=entry.base.name, steps=shared) if shared else ""


def _composed(graph: Graph, step: calculus.Step) -> list[Block]:
    """The step with the steps it names (`Declaration.composed`) put in: the book's
    exp(ω_{m,p}/√c) / Σ_r exp(ω_{m,r}/√c)."""
    letters = set(step.declaration.composed)
    element = calculus.inline(step.element.rhs, graph, letters)
    forms = {
        s.matrix.lhs: s.matrix.rhs
        for s in calculus.steps(graph)
        if s.output in letters and s.matrix is not None
    }
    assert step.matrix is not None, f"{step.output}: a composed step has a matrix form"
    matrix = step.matrix.rhs.xreplace(forms)
    lines = (
        f"{latex(step.element.lhs)} &= {latex(element)}",
        f"{latex(step.matrix.lhs)} &= {latex(matrix)}",
    )
    named = " and ".join(
        (L.role(s.output) or s.title.lower()) for s in graph.declarations if s.output in letters
    )
    how = f"the {named}' declaration put in"
    return [
        Prose(step.declaration.composed_text),
        Display(lines, derived(how, step.output, *sorted(letters))),
    ]


def _masked(graph: Graph) -> list[Block]:
    """The weights with the declared mask put in, where the graph declares one."""
    if not any(step.constant for step in graph.declarations):
        return []
    element, sources = proofs.weights_element(graph)
    (weights,) = [s for s in graph.declarations if s.output in ("A", "A_l")]
    line = equation(sp.Eq(weights.element.lhs, element, evaluate=False))
    how = "the mask put into the weights, conditions decided under the index ranges"
    _, denominator = sp.fraction(weights.element.rhs)  # a sum, or a sink's term beside it
    text = P.CAUSAL_DERIVED if isinstance(denominator, sp.Sum) else P.MASK_DERIVED
    return [Prose(text), Display((line,), derived(how, *sources))]


def steps(entry: Entry) -> list[Block]:
    changed = _changed(entry)
    intro = _intro(entry, changed)
    blocks: list[Block] = [Heading("The steps"), *([Prose(intro)] if intro else [])]
    for step in changed:
        blocks.append(Heading(step.title, 2))
        if step.declaration.text:
            blocks.append(Prose(step.declaration.text))
        blocks.append(Display((equation(step.element),), declared(step.output)))
        if step.matrix is not None:
            blocks.append(Display((equation(step.matrix),), derived(MATRIX_FORM, step.output)))
        if step.declaration.composed:
            blocks += _composed(entry.graph, step)
    return blocks + _masked(entry.graph)
