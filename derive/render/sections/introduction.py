"""The opening of a document: its heading and words, and the matrices and their shapes (every
one, where the entry has no base; else those of new shapes)."""

from __future__ import annotations

import sympy as sp

from ...graph import Entry
from ...notation import latex
from ...notation import letters as L
from .. import prose as P
from .. import prose_variants as PV
from ..blocks import Block, Heading, Prose, Table
from .common import shape

__all__ = ["introduction", "shapes", "values_of"]


def introduction(entry: Entry) -> list[Block]:
    heading = entry.document.heading or entry.title
    return [Heading(heading), *(Prose(text) for text in entry.text)]


def shapes(entry: Entry) -> list[Block]:
    """The shapes of the matrices, read off the declarations."""
    known = entry.graph.shapes
    if entry.base is None:
        letters = [*entry.graph.inputs, *(s.output for s in entry.graph.declarations)]
        rows = tuple(
            (f"${L.MATRIX_LATEX[letter]}$", shape(known[letter]), L.role(letter))
            for letter in letters
            if L.role(letter)
        )
        return [Prose(P.SHAPES), Table(("matrix", "shape", "role"), rows)]
    new = ", ".join(
        f"${L.MATRIX_LATEX[letter]}$ (${latex(known[letter][0])} \\times "
        f"{latex(known[letter][1])}$)"
        for letter in known
        if entry.base.shapes.get(letter) != known[letter]
    )
    return [Prose(PV.VARIANT_SHAPES.format(shapes=new))] if new else []


def _shown(value: object) -> str:
    """A config's number in LaTeX: an integer as one, another to six significant digits (YaRN's
    attention factor 1.34657, not the float's exact fraction)."""
    number = float(sp.sympify(value))
    return latex(sp.Integer(int(number))) if number.is_integer() else latex(sp.Float(number, 6))


def values_of(entry: Entry, options) -> list[Block]:
    """Where a model's config gave the document its values (`DocumentOptions.source`): which
    model and layer, and each value by its symbol."""
    if not options.source:
        return []
    symbols = {str(x.symbol): x.symbol for v in entry.chain for x in (*v.sizes, *v.parameters)}
    given = dict(options.given)
    said = ", ".join(
        f"${latex(symbols.get(name, sp.Symbol(name)))} = {_shown(value)}$"
        for name, value in given.items()
    )
    return [Prose(PV.MODEL_VALUES.format(source=options.source, values=said))]
