"""Chunked attention (Llama 4's `attention_chunk_size`): the positions fall into chunks of χ
tokens, and each query sees the keys of its own chunk up to itself, the causal mask cut at the
chunks' borders. Its twin: `self_attention(..., causal=True, mods=(Chunked(χ),))`, the
modification object of `attention.mods`."""

from __future__ import annotations

import sympy as sp
from sympy import Eq, Piecewise

from ...notation import letters as L
from .. import attention as S
from ..claims import BEFORE, RowsSumToOne, SameAs
from ..declaration import Declaration, Graph
from ..sizes import AtLeast, Size
from ..twins import Built, StepTwin
from ..variant import Variant
from .causal import with_pattern

__all__ = ["VARIANT", "CHUNK", "chunked_mask"]

#: The chunk's length χ (Llama 4: 8192).
CHUNK = sp.Symbol("chi", integer=True, positive=True)


def chunked_mask() -> Declaration:
    r"""$M_{m,p} = 0$ where $\chi \lfloor (m - 1)/\chi \rfloor < p \le m$ (p in m's chunk, which
    starts after position $\chi \lfloor (m - 1)/\chi \rfloor$; 1-based), $-\infty$
    otherwise."""
    start = CHUNK * sp.floor((L.m - 1) / CHUNK)  # the last position of the chunk before m's
    allowed = sp.And(sp.Le(L.p, L.m), sp.Gt(L.p, start))
    return Declaration(
        "chunked_mask",
        "M",
        "The chunked mask",
        Eq(L.base("mask")[L.m, L.p], Piecewise((0, allowed), (-sp.oo, True)), evaluate=False),
        S.SELF.shapes("M"),
        constant=True,
        twin=StepTwin("attention.functional.chunked_mask", (), (("n", L.n), ("size", CHUNK))),
        requires=(AtLeast(CHUNK, 1, "a chunk holds at least one token"),),
    )


def _chunked(graph: Graph) -> Graph:
    steps = with_pattern(graph, chunked_mask()).declarations
    return Graph(graph.name.replace("causal", "chunked"), steps, graph.relations)


VARIANT = Variant(
    "chunked",
    "Chunked attention",
    "Chunked attention (Llama 4's layers with RoPE) cuts the sequence into chunks of $\\chi$ "
    "tokens: a query sees the tokens of its own chunk up to itself, and none of an earlier "
    "chunk. A query's cost is then bounded by $\\chi$ however long the sequence, and a cache "
    "needs only the current chunk's keys and values. Llama 4 takes $\\chi = 8192$ and "
    "interleaves such layers with global ones without RoPE.",
    base="causal",
    build=_chunked,
    claims=(
        RowsSumToOne(),
        SameAs(BEFORE, assume=((CHUNK, L.n),)),
    ),
    sizes=(
        Size(
            CHUNK,
            2,
            "the chunk's length",
            option="chunk",
            meaning="the length of a chunk of chunked attention: a query sees its own chunk only",
        ),
    ),
    draws=(
        AtLeast(L.n, CHUNK + 1, "a chunk shorter than the sequence, or it is the causal mask"),
        AtLeast(CHUNK, 2, "a chunk of one token makes every weight 1"),
    ),
    options=(("mods", (Built("attention.mods.Chunked", (CHUNK,)),)),),
    rank=36,
    short="chunks",
)
