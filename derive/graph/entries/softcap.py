r"""Logit softcapping (Gemma 2), declared: each scaled score squashed into (−κ, κ) before the
masks and the softmax,

    \breve{\omega}_{m,p} = κ tanh(\tilde{\omega}_{m,p} / κ),

so that no score, however large the inputs, saturates the softmax past what the cap allows;
where |ω̃| ≪ κ the score is nearly unchanged (tanh x ≈ x). It adds ``softcap=κ`` to the twins
of the entry it modifies (`self_attention`, `multi_head_attention`, `grouped_query_attention`,
the modules); its step's twin is `attention.functional.softcapped_scores`.
"""

from __future__ import annotations

import sympy as sp
from sympy import Eq, tanh

from ...notation import letters as L
from ...notation.letters import Letter, register_letter
from ..claims import Bound, Equality, RowsSumToOne
from ..declaration import Declaration, Graph
from ..order import score_rank
from ..sizes import Parameter
from ..twins import StepTwin
from ..variant import Variant
from .scores import after_scores

#: The capped scores.
OMEGA_CAPPED = register_letter(
    Letter(
        "Omega_capped",
        "omegacap",
        r"\breve{\Omega}",
        r"\breve{\omega}",
        meaning="capped score, $\\kappa \\tanh(\\tilde\\omega_{m,p} / \\kappa)$ (softcapping)",
        indices=(L.m, L.p),
        after="omegatilde",
        gradient_after="domegatilde",
    )
)

__all__ = ["VARIANT", "softcapped_scores", "with_softcap"]


def softcapped_scores(source: str, head: bool, rows: sp.Expr, keys: sp.Expr) -> Declaration:
    r"""$\breve\omega_{m,p} = \kappa \tanh(\tilde\omega_{m,p} / \kappa)$ (`source`: the entry
    name of the scores it caps, ω̃ or the tempered ones; per head: ω̃^{(ℓ)})."""

    def entry(name: str) -> sp.Indexed:
        indices = (L.ell, L.m, L.p) if head else (L.m, L.p)
        return L.base(name)[indices]

    suffix = "_l" if head else ""
    given, capped = L.BASES[source] + suffix, "Omega_capped" + suffix
    return Declaration(
        "softcapped_scores",
        capped,
        "Softcapping the scores",
        Eq(entry("omegacap"), L.kappa * tanh(entry(source) / L.kappa), evaluate=False),
        {given: (rows, keys), capped: (rows, keys)},
        twin=StepTwin("attention.functional.softcapped_scores", options=(("cap", L.kappa),)),
    )


def with_softcap(graph: Graph) -> Graph:
    """`graph` with its scaled (or tempered) scores softcapped, and every later step reading the
    capped ones."""
    capped = after_scores(graph, lambda *at: (softcapped_scores(*at),), "omegacap", "to softcap")
    return capped.named(graph.name + " with softcapping")


_CAPPED = L.base("omegacap")[L.m, L.p]
_SCALED = L.base("omegatilde")[L.m, L.p]

VARIANT = Variant(
    "softcap",
    "Logit softcapping",
    "Logit softcapping (Gemma 2) replaces each scaled score $\\tilde\\omega$ by "
    "$\\kappa \\tanh(\\tilde\\omega / \\kappa)$ before the masks and the softmax: every score "
    "stays within $(-\\kappa, \\kappa)$ whatever the inputs, while scores much smaller than "
    "the cap pass nearly unchanged. Gemma 2 caps the attention scores at $\\kappa = 50$.",
    base="self-attention",
    build=with_softcap,
    claims=(
        Bound(
            _CAPPED,
            L.kappa,
            "No score exceeds the cap",
            text="However large a scaled score, its capped value stays below $\\kappa$ (and, "
            "the same way, above $-\\kappa$):",
        ),
        Bound(-L.kappa, _CAPPED, "No score falls below minus the cap", heading=""),
        Equality(
            sp.Limit(_CAPPED, L.kappa, sp.oo),
            _SCALED,
            "An infinite cap is no cap",
            text="As the cap grows, the capped score tends to the scaled score: "
            "softcapping with $\\kappa \\to \\infty$ is the attention it modifies.",
        ),
        RowsSumToOne(),
    ),
    parameters=(
        Parameter(
            L.kappa,
            sp.Integer(50),
            "the cap (Gemma 2's attention cap)",
            meaning="the cap of logit softcapping (Gemma 2: 50)",
        ),
    ),
    options=(("softcap", L.kappa),),
    rank=score_rank("softcap"),
    short="softcapping",
    notation=(OMEGA_CAPPED,),
)
