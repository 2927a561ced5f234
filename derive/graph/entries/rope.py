r"""Rotary position embeddings (RoPE), declared, and the transform that puts them into a graph.

The book's Llama 3 and Qwen 3 (`llms_from_scratch.llama3`, `.qwen3`) rotate each query and key
before the scores, by an angle proportional to the token's position. Its code pairs feature j
with feature j + c/2 (the two halves of a head, "rotate half"); the paper's pairs (2i, 2i+1) are
the same rotation with the features listed in another order, the same for queries and keys, so
every score is the same. The declarations follow the book's code, with 1-based indices:

    φ_{m,j} = (m − 1) θ_j,  θ_j = β^{−2(j−1)/c} (j ≤ c/2), θ_j = θ_{j−c/2} (j > c/2)   angles
    R_{j',j} = δ_{j', j−c/2} − δ_{j', j+c/2}                                     rotate half
    \mathring{q}_{m,j} = q_{m,j} cos φ_{m,j} + Σ_{j'} q_{m,j'} R_{j',j} sin φ_{m,j}  apply_rope

so that \mathring{Q} = Q ∘ cos Φ + (Q R) ∘ sin Φ: the book's ``x * cos + rotated * sin`` with
``rotated = cat(−x₂, x₁) = x R``. Token m sits at position m − 1 (the book counts from 0).

The rotation needs an even width (`Even`, on its step). Its twin: `grouped_query_attention(...,
theta_base=β)`; its step's twin, `attention.rope.rope_rotation`, which rotates by the book's
tables (`compute_rope_params`) at the positions 0 … n − 1.
"""

from __future__ import annotations

import dataclasses

import sympy as sp
from sympy import Eq, KroneckerDelta, Piecewise, Sum, cos, sin

from ...notation import letters as L
from ...notation.letters import Letter, register_letter
from ..claims import BEFORE, RelativePosition, RowsSumToOne, ZeroAngles
from ..declaration import Declaration, Graph
from ..sizes import Even, Parameter
from ..twins import StepTwin, Twin
from ..variant import Variant

#: The angles, the rotation of the pairs, and the rotated queries and keys.
PHI = register_letter(
    Letter(
        "Phi",
        "phi",
        r"\Phi",
        r"\phi",
        meaning="rotary angle of token m, feature j: its position times the pair's frequency",
        indices=(L.m, L.j),
        constant=True,
        after="rot",
    )
)
ROT = register_letter(
    Letter(
        "R",
        "rot",
        "R",
        "R",
        meaning="the rotation of RoPE's pairs: $x R$ is $[-x_2\\ x_1]$ (the book's rotate half)",
        indices=(L.j2, L.j),
        constant=True,
        after="mask",
    )
)
Q_ROT = register_letter(
    Letter(
        "Q_rot",
        "qrot",
        r"\mathring{Q}",
        r"\mathring{q}",
        meaning="query rotated by its position (RoPE)",
        indices=(L.m, L.j),
        after="du",
        gradient_after="da",
    )
)
K_ROT = register_letter(
    Letter(
        "K_rot",
        "krot",
        r"\mathring{K}",
        r"\mathring{k}",
        meaning="key rotated by its position (RoPE)",
        indices=(L.p, L.j),
        after="wo",
        gradient_after="dqrot",
    )
)

__all__ = [
    "VARIANT",
    "rope_angles",
    "rotate_half",
    "apply_rope",
    "with_rope",
    "rotations_told",
    "unscaled_angles",
]

_ROTATED = {"q": "qrot", "k": "krot", "qnorm": "qrot", "knorm": "krot"}


def _width(head: bool) -> sp.Expr:
    return L.c_h if head else L.c


def rope_angles(head: bool = False, rows: sp.Expr = L.n) -> Declaration:
    r"""$\phi_{m,j} = (m-1)\,\beta^{-2(j-1)/c}$ for $j \le c/2$, the same angle for $j$ and
    $j + c/2$: token m's position times the frequency of its pair."""
    width, m, j = _width(head), L.m, L.j
    half = width / 2
    low = (m - 1) * L.beta ** (-2 * (j - 1) / width)
    high = (m - 1) * L.beta ** (-2 * (j - half - 1) / width)
    rhs = Piecewise((low, sp.Le(j, half)), (high, True))
    return Declaration(
        "compute_rope_params",
        "Phi",
        "The rotary angles",
        Eq(L.base("phi")[m, j], rhs, evaluate=False),
        {"Phi": (rows, width)},
        constant=True,
    )


def rotate_half(head: bool = False) -> Declaration:
    r"""$R_{j',j} = \delta_{j',j-c/2} - \delta_{j',j+c/2}$: $x R$ is $[-x_2\ x_1]$, the two
    halves of x swapped, the first negated."""
    width, j2, j = _width(head), L.j2, L.j
    half = width / 2
    rhs = KroneckerDelta(j2, j - half) - KroneckerDelta(j2, j + half)
    return Declaration(
        "rotate_half",
        "R",
        "Rotating half",
        Eq(L.base("rot")[j2, j], rhs, evaluate=False),
        {"R": (width, width)},
        constant=True,
    )


def _entry(name: str, head: bool, *indices: sp.Expr) -> sp.Indexed:
    base = L.base(name)
    return base[(L.ell, *indices)] if head else base[indices]


def apply_rope(source: str, head: bool, rows: sp.Expr) -> Declaration:
    r"""$\mathring{q}_{m,j} = q_{m,j}\cos\phi_{m,j} + \sum_{j'} q_{m,j'} R_{j',j} \sin\phi_{m,j}$
    (`source`: the entry name of what is rotated: ``"q"``, ``"k"``, or their normalised
    ``"qnorm"``, ``"knorm"``); keys are rotated by their own position p."""
    width, j, j2 = _width(head), L.j, L.j2
    row = L.m if source.startswith("q") else L.p
    angle = L.base("phi")[row, j]
    rotated = Sum(_entry(source, head, row, j2) * L.base("rot")[j2, j], (j2, 1, width))
    rhs = _entry(source, head, row, j) * cos(angle) + rotated * sin(angle)
    output = _ROTATED[source]
    suffix = "_l" if head else ""
    letter, source_letter = L.BASES[output] + suffix, L.BASES[source] + suffix
    twin = StepTwin("attention.rope.rope_rotation", (source_letter,), (("theta_base", L.beta),))
    return Declaration(
        "apply_rope",
        letter,
        "Rotating the " + ("queries" if row == L.m else "keys"),
        Eq(_entry(output, head, row, j), rhs, evaluate=False),
        {
            source_letter: (rows, width),
            "Phi": (rows, width),
            "R": (width, width),
            letter: (rows, width),
        },
        twin=twin,
        requires=(Even(width, "RoPE rotates pairs of features"),),
    )


def unscaled_angles(graph: Graph, scaling: str) -> Declaration:
    """The graph's angles Φ, for `scaling` (its name in an error) to replace their frequencies;
    a ValueError where another scaling has replaced them already (its title says so)."""
    angles = graph.step("Phi")
    if angles.title.endswith("frequencies"):
        raise ValueError(
            f"{scaling} replaces RoPE's frequencies, and {angles.title.lower()} are already "
            "replaced: two scalings of one step (compute_rope_params)"
        )
    return angles


def rotations_told(graph: Graph, option: tuple[str, object]) -> tuple[Declaration, ...]:
    """The graph's steps, the twin of each rotation (``apply_rope``) given `option` as well:
    what partial, interleaved and Llama 3.1's RoPE add to the book's rotation."""

    def told(step: Declaration) -> Declaration:
        if step.name != "apply_rope" or step.twin is None:
            return step
        twin = StepTwin(step.twin.function, step.twin.arguments, (*step.twin.options, option))
        return dataclasses.replace(step, twin=twin)

    return tuple(told(step) for step in graph.declarations)


def with_rope(graph: Graph) -> Graph:
    """`graph` with its queries and keys rotated before the scores (per head, where it has
    heads): the angles, the rotation, the two rotations, and the scores reading them."""
    steps: list[Declaration] = []
    for step in graph.declarations:
        if step.name != "scores":
            steps.append(step)
            continue
        sources = [L.name_of(letter) for letter in step.inputs]
        if any(source not in _ROTATED for source in sources):
            raise ValueError(
                f"RoPE rotates queries and keys, and the scores of {graph.name} "
                f"read {', '.join(step.inputs)}"
            )
        rows = {L.name_of(letter): step.shapes[letter][0] for letter in step.inputs}
        query, key = sources
        steps += [
            rope_angles(step.head),
            rotate_half(step.head),
            apply_rope(query, step.head, rows[query]),
            apply_rope(key, step.head, rows[key]),
            step.reading({query: _ROTATED[query], key: _ROTATED[key]}),
        ]
    if len(steps) == len(graph.declarations):
        raise ValueError(f"{graph.name} has no scores for RoPE to rotate")
    return Graph(graph.name + " with RoPE", tuple(steps), graph.relations)


VARIANT = Variant(
    "rope",
    "Rotary position embeddings (RoPE)",
    "Rotary position embeddings (the book's Llama 3 and Qwen 3) rotate each query and "
    "each key by angles proportional to its position, pair of features by pair of "
    "features, before the scores. The book's code pairs feature $j$ with feature "
    "$j + c/2$ of a width $c$ ($c_h$, each head's, where there are heads) and counts "
    "positions from 0; the angles use the base $\\beta = 10\\,000$. RoPE is declared on "
    "self-attention as it is: an encoder (RoFormer, ModernBERT) rotates without a mask, a "
    "decoder is causal attention with RoPE (`causal+rope`, and every variant on causal "
    "attention: `gqa+rope` is Llama 3's).",
    base="self-attention",
    build=with_rope,
    claims=(RowsSumToOne(), RelativePosition(), ZeroAngles(BEFORE)),
    parameters=(
        Parameter(
            L.beta,
            sp.Integer(10_000),
            "the base of the rotary angles",
            meaning="base of the rotary angles (RoPE; the book's `theta_base`, 10 000)",
        ),
    ),
    twin=Twin("attention.grouped.grouped_query_attention", ("X", "W_q", "W_k", "W_v", "W_o?")),
    options=(("theta_base", L.beta),),
    rank=50,
    short="RoPE",
    notation=(PHI, ROT, Q_ROT, K_ROT),
)
