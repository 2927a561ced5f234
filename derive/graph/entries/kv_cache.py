"""Generation with a key-value cache (the book's ch. 4 bonus): causal attention one new row at a
time. It declares no step of its own; its claims derive why the cached rows give the rows of
causal attention, what the cache holds and what a new token costs. Its twin:
`attention.functional.decode_step`, called one token at a time with the cache it returns."""

from __future__ import annotations

import sympy as sp

from ...notation import letters as L
from .. import attention as S
from ..claims import CacheSize, DecodeCost, ReadsRows, RowsSumToOne
from ..declaration import Graph
from ..twins import Twin
from ..variant import Variant

__all__ = ["VARIANT", "decode_step"]


def decode_step() -> tuple[Graph, Graph]:
    """One new token against a cache of m rows: its query, scores, weights and context (K, V
    the cache), and the projections that append its own key and value to the cache."""
    one = S.Dims(queries=sp.S.One, keys=L.m)
    attend = Graph(
        "a decoding step",
        (
            S.projection("q", one),
            S.scores(dims=one),
            S.scaled_scores(dims=one),
            S.weights(dims=one),
            S.context(dims=one),
        ),
    )
    row = S.Dims(queries=sp.S.One, keys=sp.S.One)
    append = Graph("the new row of the cache", (S.projection("k", row), S.projection("v", row)))
    return attend, append


VARIANT = Variant(
    "kv-cache",
    "Generation with a key-value cache",
    "When a model generates text it adds one token at a time, and causal attention never "
    "lets an earlier token read a later one. So the keys and values of the tokens seen so "
    "far can be kept (the cache), and each new token needs only its own query, key and "
    "value, and one row of scores and weights against the cache. The derivation below "
    "shows why this gives exactly the rows of causal attention, and what it saves.",
    base="causal",
    claims=(RowsSumToOne(), ReadsRows("C"), CacheSize(("K", "V")), DecodeCost(*decode_step())),
    twin=Twin("attention.functional.decode_step", incremental=True, implies=("causal",)),
    rank=20,
    combines=False,
)
