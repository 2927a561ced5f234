r"""Partial RoPE, declared: only the first c_r features of each head are rotated.

GPT-NeoX (``rotary_pct``, 0.25 by default), Phi-2 and Qwen 3.5 (``partial_rotary_factor``,
0.25) rotate part of each head and pass the rest on unchanged: the same "rotate half" as the
book's RoPE (`rope`), on a width c_r ≤ c_h, with the frequencies of that width:

    φ_{m,j} = (m − 1) β^{−2(j−1)/c_r}          (j ≤ c_r/2)
    φ_{m,j} = (m − 1) β^{−2(j−c_r/2−1)/c_r}    (c_r/2 < j ≤ c_r)
    φ_{m,j} = 0                                (j > c_r: not rotated)
    R_{j',j} = −δ_{j',j+c_r/2} (j ≤ c_r/2),  δ_{j',j−c_r/2} (c_r/2 < j ≤ c_r),  0 (j > c_r)

so that feature j > c_r keeps q_{m,j} (cos 0 = 1, and R has no entry in its column). The
angles and rotation replace RoPE's; every other step is RoPE's. Hugging Face's
``rotary_dim = int(head_dim · partial_rotary_factor)`` is c_r. Its twins:
`grouped_query_attention(..., theta_base=β, rope_width=c_r)` and, for its step,
`attention.rope.rope_rotation(x, theta_base=β, rotated=c_r)`.
"""

from __future__ import annotations

import sympy as sp
from sympy import Eq, KroneckerDelta, Piecewise

from ...notation import letters as L
from ..claims import RelativePosition, RowsSumToOne
from ..declaration import Declaration, Graph
from ..sizes import AtLeast, Even, Size
from ..variant import Variant
from .rope import rotations_told

__all__ = ["VARIANT", "partial_angles", "partial_rotation", "with_partial_rope"]


def partial_angles(head: bool) -> Declaration:
    r"""$\phi_{m,j} = (m-1)\,\beta^{-2(j-1)/c_r}$ for $j \le c_r/2$, the same angle for $j$ and
    $j + c_r/2$, and 0 past $c_r$."""
    width, rotated, m, j = (L.c_h if head else L.c), L.c_r, L.m, L.j
    half = rotated / 2
    low = (m - 1) * L.beta ** (-2 * (j - 1) / rotated)
    high = (m - 1) * L.beta ** (-2 * (j - half - 1) / rotated)
    rhs = Piecewise((low, sp.Le(j, half)), (high, sp.Le(j, rotated)), (0, True))
    return Declaration(
        "compute_rope_params",
        "Phi",
        "The rotary angles, on the first $c_r$ features",
        Eq(L.base("phi")[m, j], rhs, evaluate=False),
        {"Phi": (L.n, width)},
        constant=True,
        requires=(
            Even(rotated, "RoPE rotates pairs of features"),
            AtLeast(width, rotated, "the rotated features are a head's first c_r"),
        ),
    )


def partial_rotation(head: bool) -> Declaration:
    r"""$R_{j',j} = -\delta_{j',j+c_r/2}$ ($j \le c_r/2$), $\delta_{j',j-c_r/2}$ ($c_r/2 < j \le
    c_r$), 0 past $c_r$: $x R = [-x_2\ x_1\ 0]$ on the halves $x_1, x_2$ of the first $c_r$."""
    width, rotated, j2, j = (L.c_h if head else L.c), L.c_r, L.j2, L.j
    half = rotated / 2
    rhs = Piecewise(
        (-KroneckerDelta(j2, j + half), sp.Le(j, half)),
        (KroneckerDelta(j2, j - half), sp.Le(j, rotated)),
        (0, True),
    )
    return Declaration(
        "rotate_half",
        "R",
        "Rotating half of the first $c_r$ features",
        Eq(L.base("rot")[j2, j], rhs, evaluate=False),
        {"R": (width, width)},
        constant=True,
    )


def with_partial_rope(graph: Graph) -> Graph:
    """`graph` (with RoPE) rotating only the first c_r features of each query and key."""
    head = graph.step("Phi").shapes["Phi"][1] != L.c
    steps = rotations_told(graph, ("rotated", L.c_r))
    partial = Graph(graph.name.replace("RoPE", "partial RoPE"), steps, graph.relations)
    return partial.with_step(partial_angles(head)).with_step(partial_rotation(head))


VARIANT = Variant(
    "partial-rope",
    "Partial RoPE",
    "Partial RoPE (GPT-NeoX, Phi-2, Qwen 3.5) rotates only the first $c_r$ features of each "
    "query and key, with the frequencies of that width, and passes the others on unchanged: "
    "their part of a score reads no position at all.",
    base="rope",
    build=with_partial_rope,
    claims=(RowsSumToOne(), RelativePosition()),
    sizes=(
        Size(
            L.c_r,
            2,
            "the rotated width of each head (partial RoPE)",
            meaning="the rotated width of each head (partial RoPE: its first $c_r$ features)",
        ),
    ),
    draws=(AtLeast(L.c, L.c_r + 2, "features left unrotated, or it is RoPE"),),
    options=(("rope_width", L.c_r),),
    rank=51,
    short="partial RoPE",
)
