"""Generation with a key-value cache (the book's ch. 4 bonus): causal attention one new row at a
time. It declares no step of its own; its claims derive why the cached rows give the rows of
causal attention, what the cache holds and what a new token costs. It combines with every
variant on causal attention (``gqa+rope+kv-cache``: Llama 3 decoding): ranked after them, its
claims are proved on the whole combination (a cache of g groups, the rotated keys, a window).
Its twins, called one token at a time with the cache they return:
`attention.functional.decode_step` (the book's one head) and
`attention.grouped.grouped_decode_step` (every option of grouped-query attention)."""

from __future__ import annotations

from ..claims import CacheSize, DecodeCost, ReadsRows, RowsSumToOne
from ..twins import Twin
from ..variant import Variant

__all__ = ["VARIANT"]


VARIANT = Variant(
    "kv-cache",
    "Generation with a key-value cache",
    "When a model generates text it adds one token at a time, and causal attention never "
    "lets an earlier token read a later one. So the keys and values of the tokens seen so "
    "far can be kept (the cache), and each new token needs only its own query, key and "
    "value, and one row of scores and weights against the cache. The derivation below "
    "shows why this gives exactly the rows of causal attention, and what it saves.",
    base="causal",
    claims=(RowsSumToOne(), ReadsRows("C"), CacheSize(("K", "V")), DecodeCost()),
    twin=Twin("attention.functional.decode_step", incremental=True, implies=("causal",)),
    also=(
        Twin(
            "attention.grouped.grouped_decode_step",
            ("X", "W_q", "W_k", "W_v", "W_o?"),
            label="grouped decode step",
            incremental=True,
            implies=("causal",),
        ),
    ),
    rank=90,  # after every variant that changes the graph: its claims are the whole's
    short="a key-value cache",
)
