"""What every section shows the same way: a fact's derivation, a shape, a claim with its words."""

from __future__ import annotations

import warnings

import sympy as sp

from ...graph.claims import Claim
from ...graph.entry import Stage
from ...graph.errors import DeclarationError, DerivationError
from ...graph.registry import registered
from ...notation import latex
from ...notation.lines import chain, equation
from ...notation.plain import plain
from ...proofs import Fact
from ...proofs.claims import prove
from ...proofs.refute import DRAWS
from .. import prose_variants as PV
from ..blocks import Block, Display, Heading, Prose, declared, derived, unproved

__all__ = ["fact_lines", "shape", "claim_blocks", "MATRIX_FORM", "UnprovedClaim"]

#: How a matrix form was derived, in the documents' provenance comments.
MATRIX_FORM = "matrix_form of the declared entry (SymPy's index-to-matrix conversion)"


def fact_lines(fact: Fact) -> tuple[str, ...]:
    """A fact's derivation as a chain; a fact whose derivation misses its claim is refused
    (a document never states what SymPy did not derive)."""
    if not fact.holds:
        raise DerivationError(
            f"prove the fact '{fact.title}' ({fact.name})",
            "SymPy's derivation did not reach its claim",
        )
    return chain(fact.derivation)


class UnprovedClaim(UserWarning):
    """A claim of a user's variant that SymPy could not prove, and that no counter-example
    refutes: the document shows it as stated, marked unproved. ``derive … --strict`` (or
    ``warnings.simplefilter("error", UnprovedClaim)``) makes it an error."""


def _stated(fact: Fact) -> str:
    """The claim as stated, in plain text: ``Σ_p a[m,p] = 1``."""
    return plain(fact.stated if fact.stated is not None else fact.claim)


def _unproved(fact: Fact, owner: str) -> list[Block]:
    """A user's claim SymPy could not prove: a DeclarationError where a counter-example refutes
    it, else the warning and the claim as stated, marked."""
    said = f"variant {owner}: claim '{fact.title}' ({_stated(fact)})"
    if fact.counterexample:
        at = ", ".join(f"{what} = {value}" for what, value in fact.counterexample)
        raise DeclarationError(f"{said} is false: at {at}")
    warnings.warn(
        UnprovedClaim(
            f"{said} could not be proved by SymPy, and no counter-example "
            f"was found in {DRAWS} draws"
        ),
        stacklevel=2,
    )
    why = f"SymPy could not prove it; no counter-example in {DRAWS} draws at n = 3, d = 2, c = 4"
    statement = fact.stated if fact.stated is not None else fact.claim
    return [Prose(PV.UNPROVED_TEXT), Display((equation(statement),), unproved(why, *fact.sources))]


def _owner(graph) -> str | None:
    """The name of the user's variant a stage belongs to, None for a built-in one."""
    if isinstance(graph, Stage) and registered(graph.variant.name) is not None:
        return graph.variant.name
    return None


def shape(dims: tuple[sp.Expr, sp.Expr]) -> str:
    """``$n \\times d$``."""
    return rf"${latex(dims[0])} \times {latex(dims[1])}$"


def _assumptions(assumptions) -> Display:
    lines = tuple(
        rf"{latex(moment)} &= {latex(symbol)} = {latex(value)}"
        for moment, symbol, value in assumptions.rows()
    )
    return Display(lines, declared("assumptions"))


def claim_blocks(claim: Claim, graph, before=None) -> list[Block]:
    """A claim as a document shows it: its heading (the fact's title unless the claim says
    otherwise), its words, its stated assumptions (declared) and the derivation SymPy found."""
    owner = _owner(graph)
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
    if not fact.holds and owner is not None:
        return blocks + _unproved(fact, owner)
    return blocks + [Display(fact_lines(fact), derived(fact.how, *fact.sources))]
