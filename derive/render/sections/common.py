"""What every section shows the same way: a fact's derivation, a shape, a claim with its words."""

from __future__ import annotations

import sympy as sp

from ...graph.claims import Claim
from ...graph.entry import Stage
from ...notation import latex
from ...notation.lines import chain
from ...proofs import Fact
from ...proofs.claims import prove
from .. import prose_variants as PV
from ..blocks import Block, Display, Heading, Prose, declared, derived

__all__ = ["fact_lines", "shape", "claim_blocks", "MATRIX_FORM"]

#: How a matrix form was derived, in the documents' provenance comments.
MATRIX_FORM = "matrix_form of the declared entry (SymPy's index-to-matrix conversion)"


def fact_lines(fact: Fact) -> tuple[str, ...]:
    """A fact's derivation as a chain; a fact whose derivation misses its claim is refused
    (a document never states what SymPy did not derive)."""
    if not fact.holds:
        raise RuntimeError(f"fact {fact.name} does not hold: residual {fact.residual}")
    return chain(fact.derivation)


def shape(dims: tuple[sp.Expr, sp.Expr]) -> str:
    """``$n \\times d$``."""
    return rf"${latex(dims[0])} \times {latex(dims[1])}$"


def _assumptions(assumptions) -> Display:
    lines = tuple(rf"{latex(moment)} &= {latex(symbol)} = {latex(value)}"
                  for moment, symbol, value in assumptions.rows())  # fmt: skip
    return Display(lines, declared("assumptions"))


def claim_blocks(claim: Claim, graph, before=None) -> list[Block]:
    """A claim as a document shows it: its heading (the fact's title unless the claim says
    otherwise), its words, its stated assumptions (declared) and the derivation SymPy found."""
    if isinstance(graph, Stage):
        graph, before = graph.graph, graph.before
    fact = prove(graph, claim, before)
    heading = fact.title if claim.heading is None else claim.heading
    text = PV.CLAIM_TEXT.get(fact.name) if claim.text is None else claim.text
    blocks: list[Block] = [Heading(heading, 2)] if heading else []
    blocks += [Prose(text)] if text else []
    assumptions = getattr(claim, "assumptions", None)
    if assumptions is not None and claim.then is not None:
        blocks += [_assumptions(assumptions), Prose(claim.then)]
    return blocks + [Display(fact_lines(fact), derived(fact.how, *fact.sources))]
