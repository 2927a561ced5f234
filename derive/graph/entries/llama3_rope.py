r"""RoPE with Llama 3.1's frequencies, declared: the slow pairs' frequencies divided by a factor.

Llama 3.1, 3.2 and 3.3 (the book's `llms_from_scratch.llama3`, ``rope_freq``; Hugging Face's
``rope_type: "llama3"``) change RoPE's frequencies ω_j = β^{−2(j−1)/c} before the angles, by
their wavelength 2π/ω_j against the context length L_0 the model was first trained at:

    ω'_j = ω_j / η                        where ω_j < 2π α_l / L_0   (slow pairs: wavelength
                                                                      past L_0/α_l)
    ω'_j = ω_j                            where ω_j > 2π α_h / L_0   (fast pairs)
    ω'_j = (1 − s_j) ω_j / η + s_j ω_j    between, s_j = (L_0 ω_j / 2π − α_l) / (α_h − α_l),
                                          declared as ω_j (1 + s_j (η − 1)) / η (shorter printed)

with the factor η, the low and high frequency factors α_l < α_h (the book's Llama 3.2: 32, 1,
4, L_0 = 8192). Each frequency is replaced where the angles read it, so that the variant
combines with partial and interleaved RoPE. The angles stay (m − 1) times a frequency of the
pair: the score still depends on p − m only. Its twins: `grouped_query_attention(...,
theta_base=β, freq_config={...})` and `attention.rope.rope_rotation(x, theta_base=β,
freq_config={...})`, the book's `compute_rope_params(..., freq_config=)` inside.
"""

from __future__ import annotations

import dataclasses

import sympy as sp
from sympy import Eq, Piecewise

from ...notation import letters as L
from ..claims import RelativePosition, RowsSumToOne
from ..declaration import Declaration, Graph
from ..sizes import Above, AtLeast, Parameter
from ..variant import Variant
from .rope import rotations_told

__all__ = ["VARIANT", "smoothed", "with_llama3_rope", "FREQ_CONFIG"]

#: The book's ``freq_config`` keys, each with its symbol (a twin's option).
FREQ_CONFIG = (
    ("factor", L.eta),
    ("low_freq_factor", L.alpha_l),
    ("high_freq_factor", L.alpha_h),
    ("original_context_length", L.L_0),
)


def smoothed(frequency: sp.Expr) -> sp.Expr:
    """ω' of a frequency ω (see the module docstring)."""
    share = (L.L_0 * frequency / (2 * sp.pi) - L.alpha_l) / (L.alpha_h - L.alpha_l)
    return Piecewise(
        (frequency / L.eta, sp.Lt(frequency, 2 * sp.pi * L.alpha_l / L.L_0)),
        (frequency, sp.Gt(frequency, 2 * sp.pi * L.alpha_h / L.L_0)),
        (frequency * (1 + share * (L.eta - 1)) / L.eta, True),
    )


def _frequencies_smoothed(step: Declaration) -> Declaration:
    rhs = step.element.rhs.replace(lambda e: isinstance(e, sp.Pow) and e.base == L.beta, smoothed)
    return dataclasses.replace(
        step,
        element=Eq(step.element.lhs, rhs, evaluate=False),
        title="The rotary angles, at Llama 3.1's frequencies",
    )


def with_llama3_rope(graph: Graph) -> Graph:
    """`graph` (with RoPE, perhaps partial or interleaved) at Llama 3.1's frequencies."""
    steps = rotations_told(graph, ("freq_config", FREQ_CONFIG))
    found = Graph(
        graph.name.replace("RoPE", "RoPE at Llama 3.1's frequencies"), steps, graph.relations
    )
    return found.with_step(_frequencies_smoothed(found.step("Phi")))


VARIANT = Variant(
    "llama3-rope",
    "RoPE at Llama 3.1's frequencies",
    "Llama 3.1, 3.2 and 3.3 stretch RoPE to longer contexts than they were first trained on "
    "by dividing the frequencies of the slow pairs, those whose wavelength $2\\pi/\\omega_j$ "
    "passes $L_0/\\alpha_l$, by a factor $\\eta$, keeping the fast ones below "
    "$L_0/\\alpha_h$, and blending the two between them (the book's Llama 3.2: "
    "$\\eta = 32$, $\\alpha_l = 1$, $\\alpha_h = 4$, $L_0 = 8192$).",
    base="rope",
    build=with_llama3_rope,
    claims=(RowsSumToOne(), RelativePosition()),
    parameters=(
        Parameter(
            L.eta,
            sp.Integer(32),
            "the factor of the slow frequencies (Llama 3.2's)",
            meaning="RoPE's frequency factor `factor`: Llama 3.1's and YaRN's divide the slow "
            "frequencies by it, linear scaling every one",
        ),
        Parameter(
            L.alpha_l,
            sp.Integer(1),
            "the low frequency factor",
            meaning="Llama 3.1's `low_freq_factor` (1): slow pairs' wavelengths pass "
            "$L_0/\\alpha_l$",
        ),
        Parameter(
            L.alpha_h,
            sp.Integer(4),
            "the high frequency factor",
            meaning="Llama 3.1's `high_freq_factor` (4): fast pairs' are below $L_0/\\alpha_h$",
        ),
        Parameter(
            L.L_0,
            sp.Integer(8192),
            "the context length first trained at",
            meaning="the context length a model was first trained at (Llama 3.1's "
            "`original_context_length`, YaRN's `original_max_position_embeddings`)",
        ),
    ),
    requires=(Above(L.alpha_h, L.alpha_l, "the blend runs between the two factors' wavelengths"),),
    draws=(AtLeast(L.c, 8, "a frequency in the blended band (at β = 10 000)"),),
    options=(("freq_config", FREQ_CONFIG),),
    rank=53,
    short="Llama 3.1's RoPE frequencies",
)
