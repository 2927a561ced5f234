r"""RoPE with interleaved pairs, declared: feature 2i − 1 turns with feature 2i.

The RoPE paper (Su et al., 2021), GPT-J, Cohere, GLM and DeepSeek's ``rope_interleave`` pair
neighbouring features, where the book's code (`rope`) pairs feature j with j + c/2:

    φ_{m,j} = (m − 1) β^{−2⌊(j−1)/2⌋/c}                 (pair ⌈j/2⌉'s angle, twice)
    R_{j',j} = −δ_{j',j+1} (j odd),  δ_{j',j−1} (j even)  (x R = [−x₂ x₁ −x₄ x₃ …])

With partial RoPE (`partial-rope`) the pairs are those of the first c_r features, with the
frequencies of that width, and the angles and rotation are 0 past c_r. The two layouts are the
same rotation of the features listed in another order, the same for queries and keys: a
checkpoint converted without reordering W_q's and W_k's columns is the classic bug
(`rope-pairing`). Its twins: `grouped_query_attention(..., theta_base=β,
rope_interleaved=True)` and, for its step, `attention.rope.rope_rotation(x, theta_base=β,
interleaved=True)`.
"""

from __future__ import annotations

import dataclasses

import sympy as sp
from sympy import Eq, KroneckerDelta, Mod, Piecewise, floor

from ...notation import letters as L
from ..claims import RelativePosition, RowsSumToOne
from ..declaration import Declaration, Graph
from ..variant import Variant
from .rope import rotations_told

__all__ = ["VARIANT", "interleaved_angles", "interleaved_rotation", "with_interleaved_rope"]


def _rotated(graph: Graph, width: sp.Expr) -> sp.Expr:
    """c_r where partial RoPE declared the angles, else the whole width."""
    return L.c_r if L.c_r in graph.step("Phi").element.rhs.free_symbols else width


def interleaved_angles(head: bool, rotated: sp.Expr) -> sp.Expr:
    r"""$\phi_{m,j} = (m-1)\,\beta^{-2\lfloor (j-1)/2 \rfloor / r}$ (r the rotated width; 0
    past it): the pair (2i − 1, 2i) turns by its angle."""
    width = L.c_h if head else L.c
    angle = (L.m - 1) * L.beta ** (-2 * floor((L.j - 1) / 2) / rotated)
    return angle if rotated == width else Piecewise((angle, sp.Le(L.j, rotated)), (0, True))


def interleaved_rotation(head: bool, rotated: sp.Expr) -> sp.Expr:
    r"""$R_{j',j} = -\delta_{j',j+1}$ for odd j, $\delta_{j',j-1}$ for even j (0 past the
    rotated width): $x R = [-x_2\ x_1\ -x_4\ x_3 \cdots]$."""
    width = L.c_h if head else L.c
    odd = Eq(Mod(L.j, 2, evaluate=False), 1)
    turn, back = -KroneckerDelta(L.j2, L.j + 1), KroneckerDelta(L.j2, L.j - 1)
    if rotated == width:
        return Piecewise((turn, odd), (back, True))
    inside = sp.Le(L.j, rotated)
    return Piecewise((turn, sp.And(odd, inside)), (back, inside), (0, True))


def _declared(graph: Graph, output: str, rhs: sp.Expr, title: str) -> Declaration:
    """The graph's step of `output` (its conditions kept: RoPE's, or partial RoPE's) with
    another right-hand side and title."""
    step = graph.step(output)
    return dataclasses.replace(step, element=Eq(step.element.lhs, rhs, evaluate=False), title=title)


def with_interleaved_rope(graph: Graph) -> Graph:
    """`graph` (with RoPE, perhaps partial) pairing neighbouring features."""
    head = graph.step("Phi").shapes["Phi"][1] != L.c
    rotated = _rotated(graph, L.c_h if head else L.c)
    steps = rotations_told(graph, ("interleaved", True))
    found = Graph(graph.name.replace("RoPE", "interleaved RoPE"), steps, graph.relations)
    angles = _declared(
        found,
        "Phi",
        interleaved_angles(head, rotated),
        "The rotary angles, pair by neighbouring pair",
    )
    rotation = _declared(
        found, "R", interleaved_rotation(head, rotated), "Rotating each pair of neighbours"
    )
    return found.with_step(angles).with_step(rotation)


VARIANT = Variant(
    "interleaved-rope",
    "RoPE with interleaved pairs",
    "The RoPE paper, GPT-J, Cohere and GLM pair each odd feature with the next one, "
    "$(2i - 1, 2i)$, where the book's code pairs feature $j$ with $j + c/2$: the same "
    "rotation of the features listed in another order, which a checkpoint converted from one "
    "layout to the other must reorder in $W_q$ and $W_k$.",
    base="rope",
    build=with_interleaved_rope,
    claims=(RowsSumToOne(), RelativePosition()),
    options=(("rope_interleaved", True),),
    rank=52,
    short="interleaved RoPE",
)
