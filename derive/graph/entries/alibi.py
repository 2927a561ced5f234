r"""ALiBi (Press, Smith and Lewis, *Train Short, Test Long*, 2022; BLOOM, MPT), declared: a bias
linear in the distance between a query and a key, added to each head's scaled scores in place
of position embeddings,

    \dot{\omega}^{(ℓ)}_{m,p} = \tilde{\omega}^{(ℓ)}_{m,p} − μ_{1,ℓ} (m − p),

with a slope μ_ℓ per head: a row μ (1 × h) of the graph's inputs (Press et al.'s geometric
sequence 2^{−8ℓ/h} in `attention.functional.alibi_slopes`; learned slopes get their gradient).
Scores the key is far from weigh less, the more so the steeper the head's slope. It adds
``alibi=μ`` to the twins of the entry it modifies; its step's twin is
`attention.functional.alibi_scores`, given head ℓ's slope.
"""

from __future__ import annotations

import sympy as sp
from sympy import Eq

from ...notation import letters as L
from ...notation.letters import Letter, register_letter
from .. import attention as S
from ..claims import Equality, RowsSumToOne, ShiftInvariance
from ..declaration import Declaration, Graph
from ..order import score_rank
from ..twins import StepTwin
from ..variant import Variant
from .scores import after_scores

#: The distances, the slopes and the biased scores.
GAP = register_letter(
    Letter(
        "Delta",
        "gap",
        r"\Delta",
        r"\Delta",
        meaning="distance of key p before query m, $m - p$ (ALiBi)",
        indices=(L.m, L.p),
        constant=True,
        after="mu",
    )
)
MU = register_letter(
    Letter(
        "Mu",
        "mu",
        r"\mu",
        r"\mu",
        meaning="slope of head $\\ell$'s linear bias (ALiBi)",
        indices=(sp.S.One, L.ell),
        after="phi",
        gradient_after="dgk",
    )
)
OMEGA_BIASED = register_letter(
    Letter(
        "Omega_biased",
        "omegabias",
        r"\dot{\Omega}",
        r"\dot{\omega}",
        meaning="score with ALiBi's bias, $\\tilde\\omega_{m,p} - \\mu_{1,\\ell} (m - p)$",
        indices=(L.m, L.p),
        after="omegacap",
        gradient_after="domegacap",
    )
)

__all__ = ["VARIANT", "alibi_scores", "with_alibi"]


def alibi_distance(rows: sp.Expr, keys: sp.Expr) -> Declaration:
    r"""$\Delta_{m,p} = m - p$: how many tokens key p is before query m."""
    return Declaration(
        "alibi_distance",
        "Delta",
        "The distances",
        Eq(L.base("gap")[L.m, L.p], L.m - L.p, evaluate=False),
        {"Delta": (rows, keys)},
        constant=True,
    )


def alibi_scores(source: str, head: bool, rows: sp.Expr, keys: sp.Expr) -> Declaration:
    r"""$\dot\omega_{m,p} = \tilde\omega_{m,p} - \mu_{1,\ell}\,\Delta_{m,p}$ (`source`: the
    entry name of the scores it biases; one head's when `head`)."""
    indices = (L.ell, L.m, L.p) if head else (L.m, L.p)
    slope = L.base("mu")[1, L.ell if head else 1]
    suffix = "_l" if head else ""
    given, biased = L.BASES[source] + suffix, "Omega_biased" + suffix
    rhs = L.base(source)[indices] - slope * L.base("gap")[L.m, L.p]
    return Declaration(
        "alibi_scores",
        biased,
        "Linear biases (ALiBi)",
        Eq(L.base("omegabias")[indices], rhs, evaluate=False),
        {
            given: (rows, keys),
            "Mu": (sp.S.One, L.h if head else sp.S.One),
            "Delta": (rows, keys),
            biased: (rows, keys),
        },
        twin=StepTwin("attention.functional.alibi_scores", (given,), (("slope", slope),)),
    )


def with_alibi(graph: Graph) -> Graph:
    """`graph` with ALiBi's bias added to its scaled (or capped) scores, every later step
    reading the biased ones."""

    def made(source: str, head: bool, rows: sp.Expr, keys: sp.Expr) -> tuple[Declaration, ...]:
        return alibi_distance(rows, keys), alibi_scores(source, head, rows, keys)

    if S.softmax_weights(graph) is None:  # its bias is a factor e^{−μ(m−p)} on the weights
        raise ValueError(
            f"{graph.name} has no softmax for ALiBi's bias, a factor e^(−μ (m − p)) on each "
            "weight, to act through"
        )
    biased = after_scores(graph, made, "omegabias", "for ALiBi to bias")
    return biased.named(graph.name + " with ALiBi")


_BIASED = L.base("omegabias")
_SCALED = L.base("omegatilde")
_SLOPE = L.base("mu")[1, 1]


def _bias(m: sp.Expr, p: sp.Expr) -> sp.Expr:
    return _BIASED[m, p] - _SCALED[m, p]


VARIANT = Variant(
    "alibi",
    "Linear biases (ALiBi)",
    "ALiBi (Press, Smith and Lewis, 2022; the attention of BLOOM and MPT) gives a model no "
    "position embeddings: it adds to each head's scores a bias proportional to the distance "
    "between the query and the key, $-\\mu_\\ell (m - p)$, with a slope $\\mu_\\ell$ per head "
    "(a geometric sequence, $2^{-8\\ell/h}$ for $h$ a power of 2). Far keys weigh less, the "
    "more so the steeper the slope, and a model trained on short sequences reads longer ones.",
    base="causal",
    build=with_alibi,
    claims=(
        Equality(
            _bias(L.m + L.t, L.p + L.t),
            _bias(L.m, L.p),
            "The bias depends on the distance only",
            text="Moving a query and a key by the same number of tokens $t$ leaves their "
            "bias as it was: it depends on the positions only through $m - p$.",
        ),
        Equality(
            sp.Subs(_BIASED[L.m, L.p], _SLOPE, 0),
            _SCALED[L.m, L.p],
            "With zero slopes, no bias",
            text="A head whose slope is 0 scores as the attention ALiBi modifies:",
        ),
        ShiftInvariance(
            text="BLOOM adds $\\mu_\\ell\\, p$ to the scores instead of $-\\mu_\\ell (m - p)$: "
            "the two differ by $\\mu_\\ell\\, m$, the same for every key of row $m$, and a "
            "constant added to a row leaves its weights unchanged, so both give the same "
            "attention:"
        ),
        RowsSumToOne(),
    ),
    options=(("alibi", "Mu"),),
    rank=score_rank("alibi"),
    short="ALiBi",
    notation=(GAP, MU, OMEGA_BIASED),
)
