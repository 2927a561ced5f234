"""The backward-pass section of a document: every gradient SymPy derives by walking the graph
backwards (`derive.calculus.backward`), the softmax's Jacobian and the rowsum identity."""

from __future__ import annotations

import sympy as sp

from ... import calculus, proofs
from ...calculus import Gradient
from ...graph import Graph
from ...notation import latex
from ...notation import letters as L
from .. import prose as P
from ..blocks import Block, Display, Heading, Prose, Table, derived
from ..lines import chain, equation, fact_lines, shape

__all__ = ["backward"]

_ELEMENT = "the entry of the matrix form, expanded by SymPy"


def _table(graph: Graph, gradients: dict[str, Gradient]) -> Table:
    shapes = graph.shapes
    output = graph.output
    rows = [(f"${L.MATRIX_LATEX[L.gradient(output)]}$", shape(shapes[output]),
             f"${L.MATRIX_LATEX[output]}$")]  # fmt: skip
    rows += [
        (f"${L.MATRIX_LATEX[g.output]}$", shape(shapes[g.of]), f"${L.MATRIX_LATEX[g.of]}$")
        for g in gradients.values()
    ]
    return Table(P.GRADIENT_TABLE_HEADER, tuple(rows))


def _display(*gradients: Gradient) -> Display:
    """Each gradient's matrix form and its entry, with how SymPy derived them."""
    lines = tuple(line for g in gradients for line in (equation(g.matrix), equation(g.element)))
    hows = sorted({part.how for g in gradients for part in g.contributions})
    sources = tuple(dict.fromkeys(part.step.output for g in gradients for part in g.contributions))
    return Display(lines, derived("; ".join(hows) + "; " + _ELEMENT, *sources))


def _softmax(graph: Graph, gradient: Gradient) -> list[Block]:
    """The Jacobian of a row, the chain rule entry by entry, and the matrix form."""
    jacobian = proofs.softmax_jacobian(graph)
    (part,) = gradient.contributions
    sources = (part.step.output,)
    return [
        Prose(P.BACKWARD_STEP_TEXT["jacobian"]),
        Display(fact_lines(jacobian), derived(jacobian.how, *jacobian.sources)),
        Prose(P.BACKWARD_STEP_TEXT["dOmega_scaled"]),
        # the chain rule, then the deltas summed out (SymPy's raw derivative, with its deltas,
        # is the Jacobian's first line above; the chain keeps it too, for whoever reads it)
        Display(chain((part.chain[0], *part.chain[2:])), derived(part.how, *sources)),
        Display(
            (equation(gradient.matrix),), derived("matrix_form of the derived entry", *sources)
        ),
    ]


def _causal(graph: Graph) -> list[Block]:
    """The masked scores' gradient where the causal weights vanish: 0 above the diagonal."""
    gradients = {g.output: g for g in calculus.backward(graph)}
    masked, scaled = gradients["dOmega_masked"], gradients["dOmega_scaled"]
    weights, sources = proofs.weights_element(graph)
    (_, condition), _ = weights.args  # a_{m,p} = 0 unless the condition holds

    def support(entry: sp.Indexed) -> sp.Expr:
        where = condition.xreplace(dict(zip((L.m, L.p), entry.indices, strict=True)))
        return sp.Piecewise((entry, where), (0, True))

    a = L.base("a")
    vanishing = masked.element.rhs.replace(
        lambda e: isinstance(e, sp.Indexed) and e.base == a, support
    )
    value = calculus.under_ranges(vanishing, {L.m: (1, L.n), L.p: (1, L.n)})
    lines = (
        equation(scaled.matrix),
        equation(scaled.element),
        f"{latex(masked.element.lhs)} &= {latex(value)}",
    )
    how = "where the causal weights vanish put into the derived gradient, under the index ranges"
    return [Prose(P.BACKWARD_CAUSAL), Display(lines, derived(how, *sources))]


def backward(
    graph: Graph, *, causal: Graph | None = None, heads: Graph | None = None
) -> list[Block]:
    """The section: shapes, each gradient, the softmax's Jacobian, the rowsum identity, and (as
    asked) the causal mask's effect and several heads."""
    gradients = {g.output: g for g in calculus.backward(graph)}
    by = gradients.__getitem__
    rowsum = proofs.rowsum_identity(graph)
    blocks: list[Block] = [
        Heading("The backward pass"),
        Prose(P.BACKWARD_INTRO),
        _table(graph, gradients),
        Heading("Through the context", 2),
        Prose(P.BACKWARD_STEP_TEXT["dA"]),
        _display(by("dA"), by("dV")),
        Heading("Through the softmax", 2),
        *_softmax(graph, by("dOmega_scaled")),
        Prose(P.BACKWARD_STEP_TEXT["dOmega"]),
        _display(by("dOmega")),
        Heading("Through the scores", 2),
        Prose(P.BACKWARD_STEP_TEXT["dQ"]),
        _display(by("dQ"), by("dK")),
        Heading("To the weights and the inputs", 2),
        Prose(P.BACKWARD_STEP_TEXT["dW_q"]),
        _display(by("dW_q"), by("dW_k"), by("dW_v")),
        _display(by("dX")),
        Heading("The rowsum identity", 2),
        Prose(P.BACKWARD_ROWSUM),
        Display(fact_lines(rowsum), derived(rowsum.how, *rowsum.sources)),
    ]
    if causal is not None:
        blocks += _causal(causal)
    if heads is not None:
        several = {g.output: g for g in calculus.backward(heads)}
        shown = [several[k] for k in ("dC_concat", "dW_o", "dC_l", "dQ")]
        blocks += [Heading("Several heads", 2), Prose(P.BACKWARD_MULTI_HEAD), _display(*shown)]
    blocks.append(Prose(P.BACKWARD_CHECKED))
    return blocks
