"""What SymPy derives about heads that share keys and values, and about what a variant stores.

- `same_for_every_head`: a per-head declaration with a substitution made (g = 1), its floor
  decided under the head's range ℓ = 1 … h: every head reads the same entries;
- `cache_against`: the entries of a variant's cache against another graph's, from the declared
  shapes, and their ratio under the size relations (c = h c_h);
- `weight_count`: the entries of some weights, from their declared shapes.
"""

from __future__ import annotations

import typing

import sympy as sp
from sympy import Eq

from ..calculus import under_ranges
from ..graph import Graph
from ..graph.claims import CacheAgainst, SameForEveryHead, WeightCount
from ..notation import letters as L
from .fact import Fact

__all__ = ["same_for_every_head", "cache_against", "weight_count", "ENTRIES"]

ENTRIES = sp.Function("entries")
_HEADS = {L.ell: (sp.S.One, L.h), L.m: (sp.S.One, L.n), L.j: (sp.S.One, L.c_h)}


def same_for_every_head(graph: Graph, claim: SameForEveryHead) -> Fact:
    """Each declaration of `claim.letters`, the substitution made and decided for ℓ = 1 … h."""
    substitute = dict(claim.substitute)
    lines, reached = [], []
    for letter in claim.letters:
        step = graph.step(letter)
        put = step.element.rhs.xreplace(substitute)
        decided = under_ranges(put, _HEADS)
        lines += [
            Eq(step.element.lhs, put, evaluate=False),
            Eq(step.element.lhs, decided, evaluate=False),
        ]
        reached.append(L.ell not in decided.free_symbols)
    last = lines[-1]
    claim_eq = Eq(last.lhs, last.rhs if all(reached) else sp.nan, evaluate=False)
    return Fact(
        "same_for_every_head",
        "One group: every head reads the same keys",
        tuple(lines),
        claim_eq,
        claim.letters,
        "the substitution made, the floor decided under ℓ = 1 … h",
    )


def _entries(shapes: dict, letters: tuple[str, ...]) -> sp.Expr:
    return sp.Add(*[shapes[letter][0] * shapes[letter][1] for letter in letters])


def _label(letters: tuple[str, ...], graph: Graph | None = None) -> sp.Expr:
    names = [sp.Symbol(L.MATRIX_LATEX[letter]) for letter in letters]
    if graph is None:
        return ENTRIES(*names)
    return sp.Function(r"\operatorname{entries}_{\text{" + graph.name + "}}")(*names)


def cache_against(graph: Graph, claim: CacheAgainst) -> Fact:
    """entries(cache) = …, entries(their cache) = …, and the ratio, simplified under c = h c_h."""
    compared = typing.cast(Graph, claim.other)  # a graph: `prove` puts it in (_resolved)
    relations = [(r.lhs, r.rhs) for r in (*graph.relations, *compared.relations)]
    mine = _entries(graph.shapes, claim.letters)
    theirs = _entries(compared.shapes, claim.theirs)
    ratio = sp.simplify((mine / theirs).subs([(L.c, L.h * L.c_h)]).subs(relations))
    lhs, other = _label(claim.letters), _label(claim.theirs, compared)
    lines = (
        Eq(lhs, mine, evaluate=False),
        Eq(other, theirs, evaluate=False),
        Eq(lhs / other, ratio, evaluate=False),
    )
    return Fact(
        "cache_against",
        "What the cache holds",
        lines,
        lines[-1],
        claim.letters + claim.theirs,
        "the entries of the cached matrices, from their declared shapes, and their "
        "ratio with c = h c_h",
    )


def weight_count(graph: Graph, claim: WeightCount) -> Fact:
    """entries(W_k) = d g c_h, …: each weight's entries from its declared shape."""
    lines = tuple(
        Eq(_label((letter,)), _entries(graph.shapes, (letter,)), evaluate=False)
        for letter in claim.letters
    )
    return Fact(
        "weight_count",
        "How many weights",
        lines,
        lines[-1],
        claim.letters,
        "the entries of the weights, from their declared shapes",
    )
