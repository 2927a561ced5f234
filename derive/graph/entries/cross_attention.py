"""Cross-attention (the book's ch. 3 bonus): queries from X (n × d), keys and values from another
sequence Y (s × d_y). Every step is self-attention's with Y where X was for the keys and values,
and s keys instead of n. Its twin: `attention.functional.cross_attention`."""

from __future__ import annotations

from ...notation import letters as L
from ...notation.letters import Letter, register_letter
from .. import attention as S
from ..claims import BEFORE, RowsSumToOne, SameAs
from ..declaration import Graph
from ..sizes import AtLeast, Size
from ..twins import Twin
from ..variant import Variant

#: The sequence the keys and values are read from.
Y = register_letter(
    Letter(
        "Y",
        "y",
        meaning="entry p of the sequence the keys and values come from (cross-attention)",
        indices=(L.p, L.i),
        after="x",
        gradient_after="dx",
    )
)

__all__ = ["VARIANT", "CROSS", "cross_attention"]

CROSS = S.Dims(queries=L.n, keys=L.s, width=L.d, source_width=L.d_y, source="y")


def cross_attention(_: Graph | None = None) -> Graph:
    """Queries from X (n × d), keys and values from Y (s × d_y)."""
    steps = (
        S.projection("q", CROSS),
        S.projection("k", CROSS),
        S.projection("v", CROSS),
        S.scores(dims=CROSS),
        S.scaled_scores(dims=CROSS),
        S.weights(dims=CROSS),
        S.context(dims=CROSS),
    )
    return Graph("cross-attention", steps)


VARIANT = Variant(
    "cross-attention",
    "Cross-attention",
    "In cross-attention the queries come from one sequence $X$ and the keys and values "
    "from another, $Y$, of $s$ entries of width $d_y$: a decoder reading the encoder's "
    "output, or text reading an image. Every step is the one of self-attention, with $Y$ "
    "where $X$ was for the keys and values, and $s$ keys instead of $n$.",
    build=cross_attention,
    claims=(
        RowsSumToOne(),
        SameAs(BEFORE, substitute=((L.base("y"), L.base("x")), (L.s, L.n), (L.d_y, L.d))),
    ),
    sizes=(
        Size(
            L.s,
            4,
            "keys read from Y",
            meaning="keys read from another sequence $Y$ (cross-attention)",
        ),
        Size(L.d_y, 5, "the width of Y", meaning="width of an entry of $Y$ (cross-attention)"),
    ),
    draws=(AtLeast(L.s, 2, "with one key every weight is 1"),),
    twin=Twin("attention.functional.cross_attention", ("X", "Y", "W_q", "W_k", "W_v")),
    rank=10,
    combines=False,
    notation=(Y,),
)
