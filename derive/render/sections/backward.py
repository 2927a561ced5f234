"""The backward pass of a document: every gradient SymPy derives by walking the entry's graph
backwards (`derive.calculus.backward`), each form checked by numbers before it is shown
(`derive.explicit.checked`), in the parts the entry's document declares (self-
attention: through the context, the softmax, the scores, to the weights), or the gradients that
differ from the base's, with the claims it places among them (the softmax's Jacobian, the rowsum
identity)."""

from __future__ import annotations

from ... import calculus
from ...calculus import Gradient
from ...explicit.checked import checked_backward
from ...graph import Entry, Show
from ...notation import letters as L
from ...notation.lines import chain, equation
from .. import prose as P
from .. import prose_variants as PV
from ..blocks import Block, Display, Heading, Prose, Table, derived
from .common import claim_blocks, shape

__all__ = ["backward"]

_ELEMENT = "the entry of the matrix form, expanded by SymPy"


def _table(entry: Entry, gradients: dict[str, Gradient]) -> Table:
    shapes = entry.graph.shapes
    output = entry.graph.output
    rows = [
        (
            f"${L.MATRIX_LATEX[L.gradient(output)]}$",
            shape(shapes[output]),
            f"${L.MATRIX_LATEX[output]}$",
        )
    ]
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


def _shown(show: Show, gradients: dict[str, Gradient]) -> list[Block]:
    """Gradients together; one derived entry by entry: its chain rule, then its matrix form."""
    found = [gradients[letter] for letter in show.letters]
    blocks: list[Block] = [Prose(show.text)] if show.text else []
    chained = [part for part in found[0].contributions if part.chain]
    if len(found) > 1 or not chained:
        return blocks + [_display(*found)]
    (part,) = chained
    sources = (part.step.output,)
    # the chain rule, then the deltas summed out (SymPy's raw derivative, with its deltas, is
    # in the Jacobian; the chain keeps it too, for whoever reads it)
    return blocks + [
        Display(chain((part.chain[0], *part.chain[2:])), derived(part.how, *sources)),
        Display(
            (equation(found[0].matrix),), derived("matrix_form of the derived entry", *sources)
        ),
    ]


def _differing(entry: Entry, gradients: dict[str, Gradient]) -> tuple[str, ...]:
    """The gradients whose matrix form or shape is not the base's."""
    base = {} if entry.base is None else {g.output: g for g in calculus.backward(entry.base)}

    def same(g: Gradient) -> bool:
        theirs = base.get(g.output)
        return theirs is not None and (theirs.matrix, theirs.shape) == (g.matrix, g.shape)

    return tuple(g.output for g in gradients.values() if not same(g))


def backward(entry: Entry) -> list[Block]:
    """The section: the gradients and their shapes, then each part of it."""
    gradients = {g.output: g for g in checked_backward(entry)}  # each checked by numbers
    base = entry.base.name if entry.base is not None else ""
    differing = _differing(entry, gradients)
    intro = entry.document.words("backward", PV.VARIANT_BACKWARD.format(base=base))
    if not differing:
        return [Heading("The backward pass"), Prose(PV.VARIANT_SAME_BACKWARD.format(base=base))]
    blocks: list[Block] = [Heading("The backward pass"), Prose(intro), _table(entry, gradients)]
    for group in entry.document.backward or ():
        blocks += [Heading(group.heading, 2)] if group.heading else []
        for item in group.items:
            if isinstance(item, Show):
                blocks += _shown(item, gradients)
            else:
                blocks += claim_blocks(item, entry.graph)
    if entry.document.backward is None:
        blocks += _shown(Show(differing), gradients)
    if any(calculus.has_kinks(g.element.rhs) for g in gradients.values()):
        blocks.append(Prose(calculus.KINK_CONVENTION))  # θ(0), sign(0): said once, here
    end = entry.document.words("backward end")
    return blocks + ([Prose(end)] if end else [])
