r"""Multi-head latent attention (DeepSeek's, as the book builds it in ch. 4), declared.

Keys and values come from one shared latent U (n × d_u), the only thing a cache keeps:

    u_{m,f} = Σ_{i=1}^{d} x_{m,i} (W_{dkv})_{i,f}        down-projection (the book's W_DKV)
    k_{m,j} = Σ_{f=1}^{d_u} u_{m,f} (W_{uk})_{f,j}       up-projections (W_UK, W_UV)
    v_{m,j} = Σ_{f=1}^{d_u} u_{m,f} (W_{uv})_{f,j}

then causal multi-head attention as in the book's ch. 3 (queries from X by W_q).
"""

from __future__ import annotations

import functools

from sympy import Eq, Sum

from ..notation import letters as L
from . import attention as S
from .declaration import Declaration, Graph

__all__ = ["latent", "from_latent", "latent_attention"]


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


@functools.cache
def latent_attention() -> Graph:
    """Causal multi-head attention whose keys and values are up-projected from the latent U."""
    steps = (
        S.projection("q"), latent(), from_latent("k"), from_latent("v"),
        *(S.split_heads(which) for which in "qkv"),
        S.scores(head=True), S.scaled_scores(head=True), S.causal_mask(),
        S.masked_scores(head=True), S.weights(head=True, masked=True), S.context(head=True),
        S.merge_heads(), S.output_projection(),
    )  # fmt: skip
    return Graph("multi-head latent attention", steps, (Eq(L.c_h, L.c / L.h),))
