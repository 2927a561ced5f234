r"""RoPE scaled by YaRN, declared: the slow pairs' frequencies divided by a factor, a ramp over
the pair index between them and the fast ones, and the rotated queries and keys multiplied by an
attention factor.

YaRN (Peng, Quesnelle, Fan and Shippole, 2023, "YaRN: Efficient Context Window Extension of
Large Language Models", §3.2 "NTK-by-parts" and §3.4) stretches RoPE from the context L_0 a
model was trained at to η L_0. GPT-OSS, DeepSeek V2 and V3, Qwen's long contexts and Ministral 3
run it (Hugging Face's ``rope_type: "yarn"``). With the frequency ω_i = β^{−2i/c} of the pair of
0-based index i = j − 1 (of the first half of a head, as the book's RoPE pairs j and j + c/2):

    x_f = c ln(L_0 / (2π β_f)) / (2 ln β),   x_s = c ln(L_0 / (2π β_s)) / (2 ln β)
    ι^f = max(0, τ ⌊x_f⌋ + (1 − τ) x_f),    ι^s = min(c − 1, τ ⌈x_s⌉ + (1 − τ) x_s)
    ξ_i = min(1, max(0, (i − ι^f) / (ι^s − ι^f)))
    ω'_i = ω_i (1 − ξ_i) + (ω_i / η) ξ_i = ω_i (1 − ξ_i (1 − 1/η))

x_· is the pair index where a pair turns β_· times over L_0 (β_f = 32 "fast" turns, β_s = 1
"slow"): pairs before ι^f keep their frequency (they turn often enough to extrapolate), pairs
past ι^s are interpolated (divided by η), and the ramp blends them between. The two ends and the
ramp are constant steps of their own (the same number in every entry of an end), so that each
prints on a line. τ = 1 rounds the range
outwards (transformers' default ``truncate``), τ = 0 keeps it as it is (GPT-OSS). The paper
states the ramp in the number of turns L_0 ω_i / (2π); its code and transformers'
(``_compute_yarn_parameters``) ramp linearly in the index between the same two ends, which is
what is declared here. Then cos and sin are multiplied by the attention factor ρ (the paper's
√(1/t) = 0.1 ln η + 1, eq. 22; DeepSeek's ``mscale`` ratio; ``attention_factor`` where a
config states it), so that each rotated query and key is ρ times the book's rotation and every
score ρ² times RoPE's. With partial RoPE only the rotated features are multiplied, as
Hugging Face's tables do.

Each frequency is replaced where the angles read it (the pair index read off its exponent), so
that the variant combines with partial and interleaved RoPE. The angles stay (m − 1) times a
frequency of the pair: the score still depends on p − m only. Its twins:
`grouped_query_attention(..., theta_base=β, freq_config={...YaRN's keys})` and
`attention.rope.rope_rotation(x, theta_base=β, freq_config={...})`.
"""

from __future__ import annotations

import dataclasses

import sympy as sp
from sympy import Eq

from ...notation import letters as L
from ...notation.letters import Letter, register_letter
from ..claims import RelativePosition, RowsSumToOne
from ..declaration import Declaration, Graph
from ..sizes import Above, AtLeast, Parameter
from ..variant import Variant
from .rope import rotations_told, unscaled_angles

__all__ = ["VARIANT", "BETA_F", "BETA_S", "TAU", "RHO", "YARN_CONFIG", "ramp", "with_yarn_rope"]

#: YaRN's ramp: the share of each pair's frequency that is interpolated (divided by η).
XI = register_letter(
    Letter(
        "Xi",
        "yarnramp",
        r"\Xi",
        r"\xi",
        meaning="YaRN's ramp: the share of the frequency of feature j's pair divided by $\\eta$ "
        "(0: kept, 1: interpolated)",
        indices=(L.m, L.j),
        constant=True,
        after="phi",
    )
)
#: The ramp's two ends: the pair indices where a pair turns β_f and β_s times over L_0.
IOTA_F = register_letter(
    Letter(
        "Iota_f",
        "iotaf",
        r"I^{\mathrm{f}}",
        r"\iota^{\mathrm{f}}",
        meaning="the low end of YaRN's ramp: the pair index where a pair turns $\\beta_f$ times "
        "over $L_0$ (the same for every m and j)",
        indices=(L.m, L.j),
        constant=True,
        after="yarnramp",
    )
)
IOTA_S = register_letter(
    Letter(
        "Iota_s",
        "iotas",
        r"I^{\mathrm{s}}",
        r"\iota^{\mathrm{s}}",
        meaning="the high end of YaRN's ramp: the pair index where a pair turns $\\beta_s$ "
        "times over $L_0$ (the same for every m and j)",
        indices=(L.m, L.j),
        constant=True,
        after="iotaf",
    )
)

#: YaRN's fast and slow numbers of turns (transformers' ``beta_fast``, ``beta_slow``), whether
#: the correction range is rounded outwards (``truncate``: 1 or 0), and the attention factor.
BETA_F = sp.Symbol("beta_f", positive=True)
BETA_S = sp.Symbol("beta_s", positive=True)
TAU = sp.Symbol("tau", nonnegative=True)
RHO = sp.Symbol("rho_a", positive=True)

#: The keys of `attention.rope`'s YaRN ``freq_config`` (Hugging Face's), each with its symbol.
YARN_CONFIG = (
    ("factor", L.eta),
    ("beta_fast", BETA_F),
    ("beta_slow", BETA_S),
    ("original_max_position_embeddings", L.L_0),
    ("truncate", TAU),
    ("attention_factor", RHO),
)


def _turned_at(turns: sp.Expr, width: sp.Expr) -> sp.Expr:
    """The pair index where a pair turns `turns` times over L_0."""
    return width * sp.log(L.L_0 / (2 * sp.pi * turns)) / (2 * sp.log(L.beta))


def _end(turns: sp.Expr, width: sp.Expr, rounded, held) -> sp.Expr:
    """One end of the ramp: the index where a pair turns `turns` times, rounded outwards by
    `rounded` where τ = 1, and `held` within the pairs."""
    at = _turned_at(turns, width)
    return held(TAU * rounded(at) + (1 - TAU) * at)


def _end_step(output: str, title: str, value: sp.Expr, shape: tuple) -> Declaration:
    entry = L.name_of(output)
    return Declaration(
        "yarn_range",
        output,
        title,
        Eq(L.base(entry)[L.m, L.j], value, evaluate=False),
        {output: shape},
        constant=True,
    )


def ramp(index: sp.Expr) -> sp.Expr:
    """ξ of the pair of 0-based `index`: its place between the ramp's ends ι^f and ι^s, held
    within [0, 1] (see the module docstring)."""
    low, high = L.base("iotaf")[L.m, L.j], L.base("iotas")[L.m, L.j]
    return sp.Min(1, sp.Max(0, (index - low) / (high - low)))


def _pair_index(frequency: sp.Pow, width: sp.Expr) -> sp.Expr:
    """i of the frequency β^{−2i/width}, read off its exponent."""
    return sp.expand(-frequency.exp * width / 2)


def _ramp_step(angles: Declaration, width: sp.Expr) -> Declaration:
    r"""$\xi_{m,j}$: the ramp of feature j's pair (each case of the angles' own: the halves, the
    interleaved pairs, 0 past a partial rotation)."""

    def index(angle: sp.Expr) -> sp.Expr | None:
        found = [e for e in angle.atoms(sp.Pow) if e.base == L.beta]
        return _pair_index(found[0], width) if found else None

    rhs = angles.element.rhs
    cases = rhs.args if isinstance(rhs, sp.Piecewise) else ((rhs, True),)
    indices = [(index(angle), condition) for angle, condition in cases]
    indices = [(i, condition) for i, condition in indices if i is not None]  # 0 past c_r: none
    if len(indices) == 1:
        share = ramp(indices[0][0])
    else:  # each case its ramp (not the cases inside one fraction: tall brackets), the last
        # holding where the others do not
        share = sp.Piecewise(
            *((ramp(i), condition) for i, condition in indices[:-1]), (ramp(indices[-1][0]), True)
        )
    shape = angles.shapes["Phi"]
    return Declaration(
        "yarn_ramp",
        "Xi",
        "The ramp over the pairs (YaRN)",
        Eq(L.base("yarnramp")[L.m, L.j], share, evaluate=False),
        {"Xi": shape, "Iota_f": shape, "Iota_s": shape},
        constant=True,
    )


def _end_steps(width: sp.Expr, shape: tuple) -> tuple[Declaration, Declaration]:
    """ι^f and ι^s: where the ramp starts and ends (rounded outwards where τ = 1, and held
    within the pairs 0 … c − 1 as transformers holds them)."""
    low = _end(BETA_F, width, sp.floor, lambda x: sp.Max(0, x))
    high = _end(BETA_S, width, sp.ceiling, lambda x: sp.Min(width - 1, x))
    return (
        _end_step("Iota_f", "Where the ramp starts (YaRN)", low, shape),
        _end_step("Iota_s", "Where the ramp ends (YaRN)", high, shape),
    )


def _rotated_width(graph: Graph) -> sp.Expr:
    angles = graph.step("Phi")
    return L.c_r if L.c_r in angles.element.rhs.free_symbols else angles.shapes["Phi"][1]


def _scaled_frequencies(step: Declaration) -> Declaration:
    """The angles at ω (1 − ξ (1 − 1/η)): each frequency ω of the pair of feature j less the
    share ξ_{m,j} of it that YaRN interpolates."""
    share = L.base("yarnramp")[L.m, L.j]
    rhs = step.element.rhs.replace(
        lambda e: isinstance(e, sp.Pow) and e.base == L.beta,
        lambda e: e * (1 - share * (1 - 1 / L.eta)),
    )
    return dataclasses.replace(
        step,
        element=Eq(step.element.lhs, rhs, evaluate=False),
        shapes={**step.shapes, "Xi": step.shapes["Phi"]},
        title="The rotary angles, at YaRN's frequencies",
    )


def _with_attention_factor(step: Declaration, width: sp.Expr, partial: bool) -> Declaration:
    """A rotation multiplied by ρ (its rotated features only, with partial RoPE)."""
    factor = sp.Piecewise((RHO, sp.Le(L.j, width)), (1, True)) if partial else RHO
    rhs = factor * step.element.rhs
    return dataclasses.replace(step, element=Eq(step.element.lhs, rhs, evaluate=False))


def with_yarn_rope(graph: Graph) -> Graph:
    """`graph` (with RoPE, perhaps partial or interleaved) at YaRN's frequencies, its rotated
    queries and keys multiplied by the attention factor."""
    angles = unscaled_angles(graph, "YaRN")
    width = _rotated_width(graph)
    partial = width == L.c_r
    steps = tuple(
        _with_attention_factor(step, width, partial) if step.name == "apply_rope" else step
        for step in rotations_told(graph, ("freq_config", YARN_CONFIG))
    )
    at = next(k for k, step in enumerate(steps) if step.output == "Phi")
    ends = _end_steps(width, angles.shapes["Phi"])
    steps = (
        *steps[:at],
        *ends,
        _ramp_step(angles, width),
        _scaled_frequencies(angles),
        *steps[at + 1 :],
    )
    return Graph(graph.name.replace("RoPE", "RoPE scaled by YaRN"), steps, graph.relations)


VARIANT = Variant(
    "yarn-rope",
    "RoPE scaled by YaRN",
    "YaRN (Peng et al., 2023) stretches RoPE to a context $\\eta$ times the one $L_0$ a model "
    "was trained at: the pairs that turn fewer than $\\beta_s$ times over $L_0$ are "
    "interpolated (their frequency divided by $\\eta$), those that turn more than $\\beta_f$ "
    "times keep theirs, a ramp over the pair index blends the two between, and the rotated "
    "queries and keys are multiplied by the attention factor $\\rho_a$ "
    "($0.1 \\ln \\eta + 1$ in the paper), every score by $\\rho_a^2$. GPT-OSS, DeepSeek V3 "
    "and Qwen's long contexts run it (GPT-OSS: $\\eta = 32$, $\\beta_f = 32$, $\\beta_s = 1$, "
    "$L_0 = 4096$, the range not rounded, $\\tau = 0$).",
    base="rope",
    build=with_yarn_rope,
    claims=(RowsSumToOne(), RelativePosition()),
    parameters=(
        Parameter(
            L.eta,
            sp.Integer(32),
            "the factor of the slow frequencies",
            meaning="RoPE's frequency factor `factor`: Llama 3.1's and YaRN's divide the slow "
            "frequencies by it, linear scaling every one",
        ),
        Parameter(
            BETA_F,
            sp.Integer(32),
            "the turns over L_0 past which a pair keeps its frequency",
            meaning="YaRN's `beta_fast` (32): a pair turning more often over $L_0$ keeps its "
            "frequency",
        ),
        Parameter(
            BETA_S,
            sp.Integer(1),
            "the turns over L_0 below which a pair is interpolated",
            meaning="YaRN's `beta_slow` (1): a pair turning less often over $L_0$ has its "
            "frequency divided by $\\eta$",
        ),
        Parameter(
            L.L_0,
            sp.Integer(4096),
            "the context length first trained at",
            meaning="the context length a model was first trained at (Llama 3.1's "
            "`original_context_length`, YaRN's `original_max_position_embeddings`)",
        ),
        Parameter(
            TAU,
            sp.Integer(1),
            "1: YaRN's correction range rounded outwards; 0: not",
            meaning="YaRN's `truncate`: 1 rounds the ramp's ends outwards (the default), 0 "
            "keeps them (GPT-OSS)",
        ),
        Parameter(
            RHO,
            sp.log(32) / 10 + 1,
            "the attention factor (YaRN's 0.1 ln 32 + 1 at η = 32)",
            meaning="YaRN's attention factor: cos and sin multiplied by it, each score by its "
            "square ($0.1 \\ln \\eta + 1$ in the paper)",
        ),
    ),
    requires=(Above(BETA_F, BETA_S, "the ramp runs from the slow turns to the fast ones"),),
    draws=(AtLeast(L.c, 8, "pairs on both sides of the ramp and in it (at β = 10 000)"),),
    options=(("freq_config", YARN_CONFIG),),
    rank=54,
    short="YaRN's RoPE scaling",
)
