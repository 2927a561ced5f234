r"""Temperature tuning (Llama 4's layers without RoPE, after Nakanishi's Scalable-Softmax),
declared: each row m of the scaled scores multiplied by a factor that grows with the position,

    \check{\omega}_{m,p} = τ_m \tilde{\omega}_{m,p},   τ_m = α log(1 + ⌊m / F⌋) + 1,

so that the weights of a long context do not flatten as the rows grow; τ_m = 1 while m < F.
Hugging Face multiplies the queries by τ_m before their products, the same numbers. It adds
``mods=(Temperature(F, α),)`` to the twins of the entry it modifies; its step's twin is
`attention.functional.temperature_scores`.
"""

from __future__ import annotations

import sympy as sp
from sympy import Eq

from ...notation import letters as L
from ...notation.letters import Letter, register_letter
from ..claims import Equality, RowsSumToOne
from ..declaration import Declaration, Graph
from ..order import score_rank
from ..sizes import Parameter
from ..twins import Built, StepTwin
from ..variant import Variant
from .scores import after_scores

#: The tempered scores.
OMEGA_TEMPERED = register_letter(
    Letter(
        "Omega_tempered",
        "omegatemp",
        r"\check{\Omega}",
        r"\check{\omega}",
        meaning="tempered score, $\\tau_m \\tilde\\omega_{m,p}$ (temperature tuning)",
        indices=(L.m, L.p),
        after="omegatilde",
        gradient_after="domegatilde",
    )
)
#: Llama 4's `attn_scale` α and `floor_scale` F.
ALPHA = sp.Symbol("alpha", positive=True)
FLOOR = sp.Symbol("F", positive=True)

__all__ = ["VARIANT", "ALPHA", "FLOOR", "factor", "temperature_scores", "with_temperature"]


def factor(m: sp.Expr) -> sp.Expr:
    """τ_m = α log(1 + ⌊m / F⌋) + 1 at the 1-based position m."""
    return ALPHA * sp.log(1 + sp.floor(m / FLOOR)) + 1


def temperature_scores(source: str, head: bool, rows: sp.Expr, keys: sp.Expr) -> Declaration:
    r"""$\check\omega_{m,p} = \tau_m \tilde\omega_{m,p}$ (`source`: the entry name of the
    scores it tempers; per head: ω̃^{(ℓ)})."""

    def entry(name: str) -> sp.Indexed:
        indices = (L.ell, L.m, L.p) if head else (L.m, L.p)
        return L.base(name)[indices]

    suffix = "_l" if head else ""
    given, tempered = L.BASES[source] + suffix, "Omega_tempered" + suffix
    return Declaration(
        "temperature_scores",
        tempered,
        "Temperature tuning",
        Eq(entry("omegatemp"), factor(L.m) * entry(source), evaluate=False),
        {given: (rows, keys), tempered: (rows, keys)},
        twin=StepTwin(
            "attention.functional.temperature_scores",
            options=(("floor", FLOOR), ("scale", ALPHA)),
        ),
    )


def with_temperature(graph: Graph) -> Graph:
    """`graph` with its scaled scores tempered, and every later step reading the tempered ones."""
    tempered = after_scores(graph, lambda *at: (temperature_scores(*at),), "omegatemp", "to temper")
    return tempered.named(graph.name + " with temperature tuning")


_TEMPERED = L.base("omegatemp")[L.m, L.p]
_SCALED = L.base("omegatilde")[L.m, L.p]

VARIANT = Variant(
    "temperature-tuning",
    "Temperature tuning",
    "Temperature tuning (Llama 4's layers without RoPE) multiplies row $m$ of the scaled "
    "scores by $\\tau_m = \\alpha \\log(1 + \\lfloor m / F \\rfloor) + 1$: past $F$ tokens the "
    "factor grows with the logarithm of the position, so that the softmax of a long row stays "
    "as sharp as a short one's (Nakanishi's Scalable-Softmax multiplies by $s \\log n$). Llama 4 "
    "takes $F = 8192$ and $\\alpha = 0.1$; before position $F$ nothing changes.",
    base="self-attention",
    build=with_temperature,
    claims=(
        RowsSumToOne(),
        Equality(
            sp.Limit(_TEMPERED, ALPHA, 0),
            _SCALED,
            "Without a slope it is the attention it modifies",
            text="As $\\alpha$ goes to 0 every factor goes to 1: the tempered score is the scaled "
            "score, and temperature tuning is the attention it modifies.",
        ),
    ),
    parameters=(
        Parameter(
            FLOOR,
            sp.Integer(8192),
            "the positions per step of the factor (Llama 4's floor_scale)",
            meaning="the floor $F$ of temperature tuning: $\\tau_m$ grows at every $F$ positions",
        ),
        Parameter(
            ALPHA,
            sp.Rational(1, 10),
            "the factor's slope (Llama 4's attn_scale)",
            meaning="the slope $\\alpha$ of temperature tuning, $\\tau_m = \\alpha \\log(1 + "
            "\\lfloor m / F \\rfloor) + 1$",
        ),
    ),
    options=(("mods", (Built("attention.mods.Temperature", (FLOOR, ALPHA)),)),),
    rank=score_rank("temperature-tuning"),
    short="temperature tuning",
    notation=(OMEGA_TEMPERED,),
)
