"""Sliding-window attention (the book's ch. 4 bonus): each query sees its last w tokens, the
causal mask with a window. Its twin: `self_attention(..., causal=True, window=w)`."""

from __future__ import annotations

import sympy as sp
from sympy import Eq, Piecewise

from ...notation import letters as L
from .. import attention as S
from ..claims import BEFORE, AllowedPairs, RowsSumToOne, SameAs
from ..declaration import Declaration, Graph
from ..sizes import AtLeast, Size
from ..twins import StepTwin
from ..variant import Variant
from .causal import with_pattern

__all__ = ["VARIANT", "sliding_window_mask"]


def sliding_window_mask() -> Declaration:
    r"""$M_{m,p} = 0$ where $m - w < p \le m$ (the query's last w tokens), $-\infty$ otherwise."""
    allowed = sp.And(sp.Le(L.p, L.m), sp.Gt(L.p, L.m - L.w))
    return Declaration(
        "sliding_window_mask",
        "M",
        "The sliding-window mask",
        Eq(L.base("mask")[L.m, L.p], Piecewise((0, allowed), (-sp.oo, True)), evaluate=False),
        S.SELF.shapes("M"),
        constant=True,
        twin=StepTwin("attention.functional.sliding_window_mask", (), (("n", L.n), ("w", L.w))),
        requires=(AtLeast(L.w, 1, "a window holds at least the query itself"),),
    )


def _windowed(graph: Graph) -> Graph:
    steps = with_pattern(graph, sliding_window_mask()).declarations
    return Graph(graph.name.replace("causal", "sliding-window"), steps, graph.relations)


VARIANT = Variant(
    "sliding-window",
    "Sliding-window attention",
    "Sliding-window attention lets each query see only its last $w$ tokens: the causal mask "
    "with a window. Long sequences then cost in proportion to their length, not to its "
    "square, and a cache of keys and values needs to keep only the last $w$ of them.",
    base="causal",
    build=_windowed,
    claims=(
        RowsSumToOne(),
        SameAs(BEFORE, assume=((L.w, L.n),)),
        AllowedPairs(assume=((L.n, L.w),)),
    ),
    sizes=(
        Size(
            L.w,
            2,
            "the window",
            meaning="the window of sliding-window attention: a query sees its last $w$ keys",
        ),
    ),
    draws=(
        AtLeast(L.n, L.w + 1, "a window narrower than the sequence, or it is the causal mask"),
        AtLeast(L.w, 2, "a window of one key makes every weight 1"),
    ),
    options=(("window", L.w),),
    rank=35,
    short="a sliding window",
)
