r"""A scale of the scores other than the book's 1/√c, declared: the scores divided by the square
root of a number of the model's config rather than of the head's width,

    \tilde{\omega}_{m,p} = \omega_{m,p} / \sqrt{c_q},

Gemma 2 and 3's `query_pre_attn_scalar` (Gemma 2 27B: c_h = 128, c_q = 144; the book's scale
is c_q = c_h) and Granite's `attention_multiplier` μ (the scores times μ: c_q = 1/μ²). It
replaces the scaled scores' step of the graph it is put into, every later step unchanged; its
twins are given ``mods=(QueryScale(c_q),)`` (`attention.mods.QueryScale`), and a module built
with that object, or a Hugging Face layer whose `scaling` is not 1/√c_h, is read as this
variant by `derive conform`.
"""

from __future__ import annotations

import sympy as sp
from sympy import Eq, sqrt

from ..claims import RowsSumToOne
from ..declaration import Declaration, Graph
from ..order import score_rank
from ..sizes import Parameter
from ..twins import Built, StepTwin
from ..variant import Variant

__all__ = ["VARIANT", "C_Q", "with_query_scale"]

#: The number whose square root divides the scores (Gemma's query_pre_attn_scalar).
C_Q = sp.Symbol("c_q", positive=True)


def _rescaled(step: Declaration) -> Declaration:
    """The scaled scores' step with ω / √c_q for ω / √c (or √c_h)."""
    (omega,) = step.element.rhs.atoms(sp.Indexed)
    return Declaration(
        step.name,
        step.output,
        "Scaling by the square root of the config's number",
        Eq(step.element.lhs, omega / sqrt(C_Q), evaluate=False),
        step.shapes,
        twin=StepTwin("attention.functional.scaled_scores", options=(("c", C_Q),)),
        text="The scores over $\\sqrt{c_q}$, a number of the model's config, in place of the "
        "square root of the head's width:",
    )


def with_query_scale(graph: Graph) -> Graph:
    """`graph` with its scaled scores divided by √c_q; a ValueError where it has none."""
    if not any(step.name == "scaled_scores" for step in graph.declarations):
        raise ValueError(f"{graph.name} has no scaled scores to scale")
    steps = tuple(
        _rescaled(step) if step.name == "scaled_scores" else step for step in graph.declarations
    )
    return Graph(graph.name + " with its own scale", steps, graph.relations)


VARIANT = Variant(
    "query-scale",
    "The config's scale of the scores",
    "Some models scale the scores by a number of their config rather than by the head's width: "
    "$\\tilde\\omega = \\omega / \\sqrt{c_q}$. Gemma 2 and 3 call $c_q$ their query "
    "pre-attention scalar (Gemma 2 27B: $c_h = 128$, $c_q = 144$); Granite multiplies the "
    "scores by its attention multiplier $\\mu$, that is $c_q = 1/\\mu^2$. With $c_q$ the "
    "head's width it is the book's scale.",
    base="self-attention",
    build=with_query_scale,
    claims=(RowsSumToOne(),),
    parameters=(
        Parameter(
            C_Q,
            sp.Integer(144),
            "the number under the root (Gemma 2 27B's query pre-attention scalar)",
            meaning="the number $c_q$ whose square root divides the scores "
            "(Gemma's query pre-attention scalar)",
        ),
    ),
    options=(("mods", (Built("attention.mods.QueryScale", (C_Q,)),)),),
    rank=score_rank("query-scale"),
    short="the config's scale",
)
