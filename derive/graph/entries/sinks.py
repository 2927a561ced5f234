r"""Attention sinks (GPT-OSS; Xiao et al., *Efficient Streaming Language Models with Attention
Sinks*, 2024), declared: a learned logit ζ_ℓ per head joins the denominator of each row's softmax,

    a^{(ℓ)}_{m,p} = exp(\hat{\omega}^{(ℓ)}_{m,p})
                    / (exp(ζ_{1,ℓ}) + Σ_r exp(\hat{\omega}^{(ℓ)}_{m,r})),

a key that every query sees, that takes weight and carries no value: a query with nothing to
attend to can put its weight there instead of on some key. The sinks are a 1 × h row of the
graph's inputs (GPT-OSS's `sinks` parameter). It adds ``sinks=ζ`` to the twins of the entry it
modifies; its step's twin is `attention.functional.weights` given head ℓ's ``sink``.
"""

from __future__ import annotations

import sympy as sp
from sympy import Eq, exp

from ...notation import letters as L
from ...notation.letters import Letter, register_letter
from .. import attention as S
from ..claims import BEFORE, RowsSumWithSink, SameAs
from ..declaration import Declaration, Graph
from ..order import score_rank
from ..twins import StepTwin
from ..variant import Variant

#: The sinks' logits, one per head.
ZETA = register_letter(
    Letter(
        "Zeta",
        "sink",
        r"\zeta",
        r"\zeta",
        meaning="logit of head $\\ell$'s attention sink, in each row's denominator (GPT-OSS)",
        indices=(sp.S.One, L.ell),
        after="gap",
        gradient_after="dmu",
    )
)

__all__ = ["VARIANT", "with_sinks", "sink_weights"]


def sink_weights(step: Declaration) -> Declaration:
    """The weights `step` declares, with head ℓ's sink logit ζ_{1,ℓ} (ζ_{1,1} for one head) in
    each row's denominator, and its twin given that logit."""
    numerator, denominator = sp.fraction(step.element.rhs)
    sink = L.base("sink")[1, L.ell if step.head else 1]
    rhs = numerator / (exp(sink) + denominator)
    twin = step.twin or StepTwin("attention.functional.weights")
    twin = StepTwin(twin.function, twin.arguments, (*twin.options, ("sink", sink)))
    shapes = {**step.shapes, "Zeta": (sp.S.One, L.h if step.head else sp.S.One)}
    shapes[step.output] = shapes.pop(step.output)  # the output last, as every step lists it
    return Declaration(
        step.name,
        step.output,
        "Attention weights, with a sink",
        Eq(step.element.lhs, rhs, evaluate=False),
        shapes,
        twin=twin,
    )


def with_sinks(graph: Graph) -> Graph:
    """`graph` with a sink's logit in the denominator of its weights (each head's own)."""
    if S.softmax_weights(graph) is None:
        raise ValueError(f"{graph.name} has no softmax for a sink to join")
    steps = tuple(sink_weights(s) if s.name == "weights" else s for s in graph.declarations)
    return Graph(graph.name + " with sinks", steps, graph.relations)


VARIANT = Variant(
    "sinks",
    "Attention sinks",
    "An attention sink (GPT-OSS's, after Xiao et al., 2024) is a learned logit $\\zeta_\\ell$ "
    "per head that joins the denominator of each row's softmax: a key every query sees, which "
    "takes weight and carries no value. A query with nothing worth attending to puts its weight "
    "there rather than on the first tokens, and a row's weights no longer sum to 1.",
    base="causal",
    build=with_sinks,
    claims=(
        RowsSumWithSink(
            text="Summed over the keys, a row's weights leave out what the sink takes, "
            "$e^{\\zeta}$ over the row's denominator: they sum to less than 1."
        ),
        SameAs(
            BEFORE,
            substitute=((L.base("sink")[1, 1], -sp.oo),),
            heading="A sink at minus infinity is no sink",
            text="With $\\zeta \\to -\\infty$ its exponential vanishes from every "
            "denominator, and the weights are those of the attention the sink joins:",
        ),
    ),
    options=(("sinks", "Zeta"),),
    rank=score_rank("sinks"),
    short="sinks",
    notation=(ZETA,),
)
