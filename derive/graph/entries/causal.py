"""Causal attention (the book's section 3.5): a token attends to itself and the tokens before it.

A mask M is declared, 0 where p ≤ m and −∞ elsewhere, and added to the scaled scores before the
softmax (`with_mask`, for one head or each head alike). Its twins: `self_attention(...,
causal=True)` and the book's `CausalAttention`; it adds ``causal=True`` to the twins of the
variants it joins.
"""

from __future__ import annotations

from ...notation import letters as L
from ...notation.letters import Letter, register_letter
from .. import attention as S
from ..claims import RowsSumToOne
from ..declaration import Declaration, Graph
from ..twins import ModuleTwin
from ..variant import Document, Variant

#: The mask, 0 or −∞, and the scores it masks (causal and masked attention).
MASK = register_letter(
    Letter(
        "M",
        "mask",
        "M",
        "M",
        meaning="mask: 0 where token m may attend to p, minus infinity where not",
        indices=(L.m, L.p),
        constant=True,
        after="omegahat",
    )
)
OMEGA_MASKED = register_letter(
    Letter(
        "Omega_masked",
        "omegahat",
        r"\hat{\Omega}",
        r"\hat{\omega}",
        meaning="masked score",
        indices=(L.m, L.p),
        after="omegabias",
        gradient_after="domegabias",
    )
)

__all__ = ["VARIANT", "with_mask"]

TEXT = (
    "Causal attention: when processing token $m$, a decoder may not look at the tokens after "
    "it. A mask $M$ is declared, 0 where a token may attend and minus infinity where it may "
    "not, and added to the scaled scores before the softmax, which is the same declaration as "
    "the softmax of self-attention, read on the masked scores. A query that may attend to no "
    "key at all (a fully masked row, possible with a padding mask) would divide 0 by 0; by "
    "convention its weights and its context vector are 0, which is what the implementation "
    "returns, with finite gradients."
)


def with_mask(graph: Graph, mask: Declaration | None, name: str) -> Graph:
    """`graph` with a mask M added to the scaled scores before the softmax (each head's): the
    declared `mask` (None: M is an input, given)."""
    if graph.producer("M") is not None or "M" in graph.inputs:
        raise ValueError(f"{graph.name} has a mask M already")
    steps: list[Declaration] = []
    for step in graph.declarations:
        if step.name == "weights":
            if step.element != S.weights(head=step.head).element:
                raise ValueError(
                    f"its weights {step.output} are not the softmax of the scaled "
                    "scores that a mask is added to"
                )
            step = S.weights(head=step.head, masked=True)
        steps.append(step)
        if step.name == "scaled_scores":
            steps += [*([mask] if mask is not None else []), S.masked_scores(head=step.head)]
    if not any(step.name == "masked_scores" for step in steps):
        raise ValueError(f"{graph.name} has no scaled scores to mask")
    named = graph.name.replace("self-attention", f"{name} self-attention")
    return Graph(named, tuple(steps), graph.relations)


_LINEAR = (
    ("W_query.weight", "W_q", True),
    ("W_key.weight", "W_k", True),
    ("W_value.weight", "W_v", True),
)

VARIANT = Variant(
    "causal",
    "Causal attention",
    TEXT,
    build=lambda graph: with_mask(graph, S.causal_mask(), "causal"),
    claims=(RowsSumToOne(),),
    options=(("causal", True),),
    also=(
        ModuleTwin("attention.CausalAttention", (L.d, L.c, L.n, 0.0), _LINEAR, implies=("causal",)),
    ),
    rank=30,
    short="causal attention",
    document=Document(sections=(*Document().sections, "example")),
    notation=(MASK, OMEGA_MASKED),
)
