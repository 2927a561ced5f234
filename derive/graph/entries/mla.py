r"""Multi-head latent attention (DeepSeek's, as the book builds it in ch. 4), declared.

Keys and values come from one shared latent U (n × d_u), the only thing a cache keeps:

    u_{m,f} = Σ_{i=1}^{d} x_{m,i} (W_{dkv})_{i,f}        down-projection (the book's W_DKV)
    k_{m,j} = Σ_{f=1}^{d_u} u_{m,f} (W_{uk})_{f,j}       up-projections (W_UK, W_UV)
    v_{m,j} = Σ_{f=1}^{d_u} u_{m,f} (W_{uv})_{f,j}

then causal multi-head attention as in the book's ch. 3 (queries from X by W_q). Its twin:
`attention.latent.latent_attention`.
"""

from __future__ import annotations

from sympy import Eq, Sum

from ...notation import letters as L
from ...notation.letters import Letter, Name, register_letter
from .. import attention as S
from ..claims import Absorption, CacheAgainst, RowsSumToOne
from ..declaration import Declaration, Graph
from ..sizes import Size
from ..twins import Twin
from ..variant import Variant

#: The shared latent of keys and values, and its projections.
U = register_letter(
    Letter(
        "U",
        "u",
        meaning="latent of token m, feature f: what the cache keeps (latent attention)",
        indices=(L.m, L.f),
        after="y",
        gradient_after="dv",
    )
)
W_DKV = register_letter(
    Letter(
        "W_dkv",
        "wdkv",
        "W_{dkv}",
        "(W_{dkv})",
        meaning="down-projection weight to the latent (the book's `W_DKV`)",
        indices=(L.i, L.f),
        after="wq",
        gradient_after="dwq",
    )
)
W_UK = register_letter(
    Letter(
        "W_uk",
        "wuk",
        "W_{uk}",
        "(W_{uk})",
        meaning="up-projection weight from the latent to the keys (the book's `W_UK`)",
        indices=(L.f, L.j),
        after="wv",
        gradient_after="dwv",
    )
)
W_UV = register_letter(
    Letter(
        "W_uv",
        "wuv",
        "W_{uv}",
        "(W_{uv})",
        meaning="up-projection weight from the latent to the values (the book's `W_UV`)",
        indices=(L.f, L.j),
        after="wuk",
        gradient_after="dwuk",
    )
)
NAMES = (Name(L.f, "a feature of the latent $U$ (multi-head latent attention)", "index"),)

__all__ = ["VARIANT", "latent", "from_latent", "with_latent"]


def latent() -> Declaration:
    r"""$u_{m,f} = \sum_{i=1}^{d} x_{m,i} (W_{dkv})_{i,f}$: the shared latent of each token."""
    rhs = Sum(L.base("x")[L.m, L.i] * L.base("wdkv")[L.i, L.f], (L.i, 1, L.d))
    return Declaration(
        "projection",
        "U",
        "The latent of keys and values",
        Eq(L.base("u")[L.m, L.f], rhs, evaluate=False),
        S.SELF.shapes("X", "W_dkv", "U"),
    )


def from_latent(which: str) -> Declaration:
    r"""$k_{m,j} = \sum_{f=1}^{d_u} u_{m,f} (W_{uk})_{f,j}$ (`which`: ``"k"`` or ``"v"``)."""
    weight = "wu" + which
    rhs = Sum(L.base("u")[L.m, L.f] * L.base(weight)[L.f, L.j], (L.f, 1, L.d_u))
    letter = which.upper()
    return Declaration(
        "projection",
        letter,
        ("Keys" if which == "k" else "Values") + " from the latent",
        Eq(L.base(which)[L.m, L.j], rhs, evaluate=False),
        S.SELF.shapes("U", L.BASES[weight], letter),
    )


def with_latent(graph: Graph) -> Graph:
    """`graph` with its keys and values up-projected from the latent U (inserted before them)."""
    steps = graph.with_step(from_latent("k")).with_step(from_latent("v"))
    first = min(steps.declarations.index(steps.step(x)) for x in ("K", "V"))
    before = steps.declarations[first - 1].output
    return steps.inserted(before, latent()).named("multi-head latent attention")


VARIANT = Variant(
    "mla",
    "Multi-head latent attention",
    "Multi-head latent attention (DeepSeek's; the book builds it in ch. 4) projects each "
    "token once to a small latent $U$ of width $d_u$, and computes the keys and values "
    "from it. A cache keeps the latent only, and a head's scores can be computed from the "
    "latent without ever forming the keys.",
    base="causal+multi-head",
    build=with_latent,
    claims=(RowsSumToOne(), Absorption(), CacheAgainst(("U",))),
    sizes=(
        Size(
            L.d_u,
            2,
            "the width of the latent",
            meaning="width of the latent $U$ of keys and values (multi-head latent attention)",
        ),
    ),
    twin=Twin("attention.latent.latent_attention", ("X", "W_q", "W_dkv", "W_uk", "W_uv", "W_o")),
    rank=20,
    alone="it computes the keys and values (K, V) from a latent U and derives the absorbed "
    "form for multi-head attention as declared; with another variant's steps between the "
    "latent and the scores (RoPE: DeepSeek's decoupled keys) the absorption is not derived",
    notation=(U, W_DKV, W_UK, W_UV, *NAMES),
)
