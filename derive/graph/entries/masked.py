"""Masked attention: a mask M given as an input (0 where a query may attend, −∞ where not:
padding, or any pattern), added to the scaled scores before the softmax. Its twin:
`self_attention(..., mask=M)`, M as booleans (True where a query may attend). On a graph masked
already (causal attention, a window, a chunk: every batched decoder), both mask the scores,
ω̂ = ω̃ + M̊ + M, the pattern written M̊ (`causal.with_mask`)."""

from __future__ import annotations

from ..claims import RowsSumToOne
from ..variant import Variant
from .causal import MASK_FIXED, with_mask

__all__ = ["VARIANT"]

VARIANT = Variant(
    "masked",
    "Masked attention",
    "A mask $M$ given with the input, 0 where a query may attend a key and minus infinity where "
    "it may not (the padding of a batch of sequences of different lengths, or any pattern), is "
    "added to the scaled scores before the softmax. A query that may attend to no key at all "
    "gets zero weights and a zero context vector, by convention.",
    build=lambda graph: with_mask(graph, None, "masked"),
    claims=(RowsSumToOne(),),
    options=(("mask", "M"),),
    rank=30,
    short="a given mask",
    notation=(MASK_FIXED,),
)
