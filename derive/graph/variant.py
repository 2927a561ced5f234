"""What a registered variant is: its graph, the claims its document proves, its sizes and the
`attention` function that computes it (`Twin`); and the sizes an explicit instance of it takes,
checked."""

from __future__ import annotations

from dataclasses import dataclass

import sympy as sp

from ..notation import letters as L
from .claims import Claim
from .declaration import Graph

__all__ = ["Variant", "Twin", "explicit_sizes"]


@dataclass(frozen=True)
class Variant:
    """One variant of attention.

    Attributes:
        name: its key (``"sliding-window"``), as `derive latex --variant NAME` takes it; a
            combination joins its parts with ``+`` (``"gqa+rope"``).
        title: a few words for documents.
        graph: its declarations.
        base: the graph whose steps it shares; its document refers to them.
        claims: what SymPy derives about it (proved in `derive.proofs.claims`).
        sizes: the sizes it adds to n, d, c, with the value its explicit matrices use by
            default (``((w, 2),)``; h is given by ``--heads``).
        twin: the `attention` function that computes it, and how to call it.
        text: a few sentences for its document (words only; the formulas come from the graph).
        parameters: fixed numbers its explicit matrices use for symbols that are not sizes
            (RoPE's base β = 10 000, QK-norm's ε = 10⁻⁶: the book's values).
    """

    name: str
    title: str
    graph: Graph
    base: Graph
    claims: tuple[Claim, ...]
    sizes: tuple[tuple[sp.Symbol, int], ...]
    twin: Twin
    text: str
    parameters: tuple[tuple[sp.Symbol, sp.Expr], ...] = ()

    @property
    def heads(self) -> bool:
        """True when its graph has heads (then h is one of its sizes)."""
        return any(step.head for step in self.graph.declarations)


@dataclass(frozen=True)
class Twin:
    """How `derive check --variant` calls the `attention` function that computes a variant.

    Attributes:
        function: its dotted name (``"attention.functional.cross_attention"``).
        arguments: the graph's inputs it takes, in order (``("X", "Y", "W_q", "W_k", "W_v")``).
        options: keyword arguments: a value, a size or parameter symbol put in at the check's
            sizes, or the letter of an input of one row, passed as a vector (``("q_gain",
            "G_q")``).
        incremental: called one new row of X at a time with the cache it returned last
            (``decode_step(x_new, w_q, w_k, w_v, cache=None) -> (context rows, cache)``).
    """

    function: str
    arguments: tuple[str, ...] = ("X", "W_q", "W_k", "W_v")
    options: tuple[tuple[str, object], ...] = ()
    incremental: bool = False


def _divides(small: str, a: int, large: str, b: int, why: str) -> None:
    if b % a:
        raise ValueError(f"{small}={a} does not divide {large}={b} ({why})")


def explicit_sizes(found: Variant, n: int, d: int, c: int, given: dict[str, int]) -> dict:
    """n, d, c, the variant's own sizes (given by name, or its defaults), c_h = c / h where it
    has heads, and its parameters; a ValueError naming the sizes that do not fit together."""
    sizes: dict[sp.Symbol, sp.Expr] = {L.n: n, L.d: d, L.c: c}
    sizes |= {symbol: given.get(str(symbol), default) for symbol, default in found.sizes}
    if L.h in sizes:
        heads = sizes[L.h]
        _divides("h", heads, "c", c, "each head gets c / h columns")
        sizes[L.c_h] = c // heads
        if L.g in sizes:
            _divides("g", sizes[L.g], "h", heads, "each group serves h / g heads")
    width = sizes.get(L.c_h, c)
    if any(step.name == "apply_rope" for step in found.graph.declarations) and width % 2:
        which = "c / h" if L.c_h in sizes else "c"
        raise ValueError(f"RoPE rotates pairs of features: {which}={width} must be even")
    return sizes | dict(found.parameters)
