"""The registry of variants: each a graph of declarations and the claims its document proves.

A variant is added here, once: its declarations (built from the steps of
`derive.graph.attention`, with the few it changes), the graph whose steps it shares (referenced
in its document, not repeated), the sizes it adds, the claims SymPy is to derive about it, and
the `attention` function that computes it. Its document, its explicit matrices, `derive check
--variant` and its consistency tests come from this entry.

- ``kv-cache``: causal attention computed one new row at a time against cached keys and values;
- ``sliding-window``: each query sees its last w keys (the mask declared);
- ``cross-attention``: queries from X, keys and values from another sequence Y (s × d_y);
- ``rope``, ``gqa``, ``qk-norm``, ``mla``: the attention of the book's Llama 3, Qwen 3 and
  DeepSeek's latent attention (`derive.graph.models`); ``gqa``, ``qk-norm`` and ``rope``
  combine as the models combine them (``gqa+rope`` is Llama 3's, ``gqa+qk-norm+rope`` Qwen 3's).
"""

from __future__ import annotations

import functools

import sympy as sp
from sympy import Eq, Piecewise

from ..notation import letters as L
from . import attention as S
from .claims import AllowedPairs, CacheSize, DecodeCost, ReadsRows, SameAs
from .declaration import Declaration, Graph
from .models import combination, models
from .variant import Twin, Variant, explicit_sizes

__all__ = ["Twin", "Variant", "variants", "variant", "REGISTRY", "explicit_sizes"]


def sliding_window_mask() -> Declaration:
    r"""$M_{m,p} = 0$ where $m - w < p \le m$ (the query's last w tokens), $-\infty$ otherwise."""
    allowed = sp.And(sp.Le(L.p, L.m), sp.Gt(L.p, L.m - L.w))
    return Declaration(
        "sliding_window_mask",
        "M",
        "The sliding-window mask",
        Eq(L.base("mask")[L.m, L.p], Piecewise((0, allowed), (-sp.oo, True)), evaluate=False),
        S.SELF.shapes("M"),
        constant=True,
    )


def _masked_by(mask: Declaration, name: str) -> Graph:
    steps = (
        S.projection("q"), S.projection("k"), S.projection("v"), S.scores(), S.scaled_scores(),
        mask, S.masked_scores(), S.weights(masked=True), S.context(),
    )  # fmt: skip
    return Graph(name, steps)


CROSS = S.Dims(queries=L.n, keys=L.s, width=L.d, source_width=L.d_y, source="y")


def cross_attention() -> Graph:
    """Queries from X (n × d), keys and values from Y (s × d_y)."""
    steps = (
        S.projection("q", CROSS), S.projection("k", CROSS), S.projection("v", CROSS),
        S.scores(dims=CROSS), S.scaled_scores(dims=CROSS), S.weights(dims=CROSS),
        S.context(dims=CROSS),
    )  # fmt: skip
    return Graph("cross-attention", steps)


def decode_step() -> tuple[Graph, Graph]:
    """One new token against a cache of m rows: its query, scores, weights and context (K, V
    the cache), and the projections that append its own key and value to the cache."""
    one = S.Dims(queries=sp.S.One, keys=L.m)
    attend = Graph("a decoding step", (
        S.projection("q", one), S.scores(dims=one), S.scaled_scores(dims=one),
        S.weights(dims=one), S.context(dims=one),
    ))  # fmt: skip
    row = S.Dims(queries=sp.S.One, keys=sp.S.One)
    append = Graph("the new row of the cache", (S.projection("k", row), S.projection("v", row)))
    return attend, append


def _kv_cache() -> Variant:
    causal = S.self_attention(causal=True)
    attend, append = decode_step()
    return Variant(
        "kv-cache",
        "Generation with a key-value cache",
        causal,
        causal,
        (ReadsRows("C"), CacheSize(("K", "V")), DecodeCost(attend, append)),
        (),
        Twin("attention.functional.decode_step", incremental=True),
        "When a model generates text it adds one token at a time, and causal attention never "
        "lets an earlier token read a later one. So the keys and values of the tokens seen so "
        "far can be kept (the cache), and each new token needs only its own query, key and "
        "value, and one row of scores and weights against the cache. The derivation below "
        "shows why this gives exactly the rows of causal attention, and what it saves.",
    )


def _sliding_window() -> Variant:
    graph = _masked_by(sliding_window_mask(), "sliding-window self-attention")
    causal = S.self_attention(causal=True)
    return Variant(
        "sliding-window",
        "Sliding-window attention",
        graph,
        causal,
        (SameAs(causal, assume=((L.w, L.n),)), AllowedPairs(assume=((L.n, L.w),))),
        ((L.w, 2),),
        Twin("attention.functional.self_attention", options=(("causal", True), ("window", L.w))),
        "Sliding-window attention lets each query see only its last $w$ tokens: the causal mask "
        "with a window. Long sequences then cost in proportion to their length, not to its "
        "square, and a cache of keys and values needs to keep only the last $w$ of them.",
    )


def _cross_attention() -> Variant:
    base = S.self_attention()
    same = ((L.base("y"), L.base("x")), (L.s, L.n), (L.d_y, L.d))
    return Variant(
        "cross-attention",
        "Cross-attention",
        cross_attention(),
        base,
        (SameAs(base, substitute=same),),
        ((L.s, 4), (L.d_y, 5)),
        Twin("attention.functional.cross_attention", arguments=("X", "Y", "W_q", "W_k", "W_v")),
        "In cross-attention the queries come from one sequence $X$ and the keys and values "
        "from another, $Y$, of $s$ entries of width $d_y$: a decoder reading the encoder's "
        "output, or text reading an image. Every step is the one of self-attention, with $Y$ "
        "where $X$ was for the keys and values, and $s$ keys instead of $n$.",
    )


@functools.cache
def _registry() -> dict[str, Variant]:
    built = (_kv_cache(), _sliding_window(), _cross_attention(), *models())
    return {variant.name: variant for variant in built}


REGISTRY = _registry


def variants() -> tuple[str, ...]:
    """The names of the registered variants."""
    return tuple(_registry())


def variant(name: str) -> Variant:
    """The variant registered under `name`, or the combination of variants ``"gqa+rope"``; a
    ValueError naming the known ones otherwise."""
    found = _registry().get(name)
    if found is not None:
        return found
    parts = name.split("+") if isinstance(name, str) else []
    unknown = [part for part in parts if part not in _registry()]
    if len(parts) < 2 or unknown:
        raise ValueError(f"unknown variant {name!r}; known: {', '.join(variants())} "
                         "(gqa, qk-norm and rope combine: gqa+rope)")  # fmt: skip
    return combination(tuple(parts))
