r"""Clamping the scores, declared: each scaled score held within [−γ, γ] before the masks and
the softmax,

    \mathring{\omega}_{m,p} = −γ where \tilde{\omega}_{m,p} < −γ,  \tilde{\omega}_{m,p} where
    −γ ≤ \tilde{\omega}_{m,p} ≤ γ,  γ where \tilde{\omega}_{m,p} > γ,

the hard counterpart of Gemma 2's logit softcapping (κ tanh(ω̃ / κ)): a score within the bound
passes unchanged, one beyond it is cut to the bound and passes no gradient back. Some ports of
softcapping write it this way to save the tanh; a document that derives both shows where they
part. It is also the project's example of adding a score modification end to end
(docs/guides/modifications.md): this module, the object `attention.mods.Clamp` its twins are
given (``mods=(Clamp(γ),)``), one line in `derive.graph.entries`, and a row of the tests' table
of modifications.
"""

from __future__ import annotations

import sympy as sp
from sympy import Eq, Piecewise

from ...notation import letters as L
from ...notation.letters import Letter, register_letter
from ..claims import Bound, RowsSumToOne
from ..declaration import Declaration, Graph
from ..order import score_rank
from ..sizes import Parameter
from ..twins import Built
from ..variant import Variant
from .scores import after_scores

#: The clamped scores.
OMEGA_CLAMPED = register_letter(
    Letter(
        "Omega_clamped",
        "omegaclamp",
        r"\mathring{\Omega}",
        r"\mathring{\omega}",
        meaning="clamped score, $\\tilde\\omega_{m,p}$ held within $[-\\gamma, \\gamma]$ "
        "(clamping)",
        indices=(L.m, L.p),
        after="omegatilde",
        gradient_after="domegatilde",
    )
)
#: The bound of the clamp.
GAMMA = sp.Symbol("gamma", positive=True)

__all__ = ["VARIANT", "GAMMA", "clamped", "clamped_scores", "with_clamp"]


def clamped(score: sp.Expr) -> sp.Expr:
    """−γ below −γ, γ above γ, the score between: each branch holds where the ones before it do
    not, so the middle one reads −γ ≤ ω̃ ≤ γ (what the bounds' proofs use)."""
    return Piecewise((-GAMMA, score < -GAMMA), (score, score <= GAMMA), (GAMMA, True))


def clamped_scores(source: str, head: bool, rows: sp.Expr, keys: sp.Expr) -> Declaration:
    r"""$\mathring\omega_{m,p}$ = $\tilde\omega_{m,p}$ held within $[-\gamma, \gamma]$
    (`source`: the entry name of the scores it clamps; per head: ω̃^{(ℓ)})."""

    def entry(name: str) -> sp.Indexed:
        indices = (L.ell, L.m, L.p) if head else (L.m, L.p)
        return L.base(name)[indices]

    suffix = "_l" if head else ""
    given, held = L.BASES[source] + suffix, "Omega_clamped" + suffix
    return Declaration(
        "clamped_scores",
        held,
        "Clamping the scores",
        Eq(entry("omegaclamp"), clamped(entry(source)), evaluate=False),
        {given: (rows, keys), held: (rows, keys)},
    )


def with_clamp(graph: Graph) -> Graph:
    """`graph` with its scaled (or tempered, or capped) scores clamped, and every later step
    reading the clamped ones."""
    held = after_scores(graph, lambda *at: (clamped_scores(*at),), "omegaclamp", "to clamp")
    return held.named(graph.name + " with clamping")


_CLAMPED = L.base("omegaclamp")[L.m, L.p]

VARIANT = Variant(
    "clamp",
    "Clamping the scores",
    "Clamping holds each scaled score $\\tilde\\omega$ within $[-\\gamma, \\gamma]$ before the "
    "masks and the softmax: the hard counterpart of logit softcapping's "
    "$\\kappa \\tanh(\\tilde\\omega / \\kappa)$. A score within the bound passes unchanged, "
    "one beyond it becomes the bound and its gradient is 0.",
    base="self-attention",
    build=with_clamp,
    claims=(
        Bound(
            _CLAMPED,
            GAMMA,
            "No score exceeds the bound",
            text="However large a scaled score, its clamped value is at most $\\gamma$ (and, "
            "the same way, at least $-\\gamma$):",
        ),
        Bound(-GAMMA, _CLAMPED, "No score falls below minus the bound", heading=""),
        RowsSumToOne(),
    ),
    parameters=(
        Parameter(
            GAMMA,
            sp.Integer(50),
            "the bound (as Gemma 2's cap)",
            meaning="the bound $\\gamma$ of clamping: every score held within "
            "$[-\\gamma, \\gamma]$",
        ),
    ),
    options=(("mods", (Built("attention.mods.Clamp", (GAMMA,)),)),),
    rank=score_rank("clamp"),
    short="clamping",
    notation=(OMEGA_CLAMPED,),
)
