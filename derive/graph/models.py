"""The attention of the book's later models, as variants: RoPE, grouped-query attention and
QK-norm (Llama 3, Qwen 3), which combine, and multi-head latent attention (DeepSeek, ch. 4).

Each of ``gqa``, ``qk-norm`` and ``rope`` is a `Layer`: a transform of a graph and the claims
it brings. A combination applies its layers in the order the models do (the groups first, then
the normalisation, then the rotation: Qwen 3 normalises, then rotates), each claim proved on
the graph it is about. ``gqa+rope`` is Llama 3's attention, ``gqa+qk-norm+rope`` Qwen 3's.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import sympy as sp

from ..notation import letters as L
from . import attention as S
from .claims import (
    Absorption,
    CacheAgainst,
    Claim,
    On,
    RelativePosition,
    SameAs,
    SameForEveryHead,
    ScoreBound,
    WeightCount,
    ZeroAngles,
)  # fmt: skip
from .declaration import Graph
from .grouped import GROUPED, split_groups
from .latent import latent_attention
from .norm import with_qk_norm
from .rope import with_rope
from .variant import Twin, Variant

__all__ = ["Layer", "LAYERS", "combination", "models", "grouped"]

Wrap = Callable[[Graph], Graph]


def grouped(graph: Graph) -> Graph:
    """Multi-head `graph` with g groups of keys and values: K, V (and W_k, W_v) g c_h wide,
    head ℓ reading its group's block."""
    replaced = {"K": S.projection("k", GROUPED), "V": S.projection("v", GROUPED),
                "K_l": split_groups("k"), "V_l": split_groups("v")}  # fmt: skip
    steps = tuple(replaced.get(step.output, step) for step in graph.declarations)
    return Graph("grouped-query attention", steps, graph.relations)


@dataclass(frozen=True)
class Layer:
    """A variant that combines with others: a transform of a graph, and what it brings.

    Attributes:
        name: its key; rank: where it goes in a combination; title, text: its words.
        transform: the graph with this variant applied.
        claims: (the graph before it, the layers after it applied to a graph) -> its claims.
        heads: True when it needs heads (the graph it starts from is multi-head).
        sizes, parameters, options: as in `Variant` and `Twin`.
    """

    name: str
    rank: int
    title: str
    text: str
    transform: Wrap
    claims: Callable[[Graph, Wrap], tuple[Claim, ...]]
    heads: bool = False
    sizes: tuple[tuple[sp.Symbol, int], ...] = ()
    parameters: tuple[tuple[sp.Symbol, sp.Expr], ...] = ()
    options: tuple[tuple[str, object], ...] = ()


def _gqa_claims(before: Graph, wrap: Wrap) -> tuple[Claim, ...]:
    return (
        SameAs(wrap(before), substitute=((L.g, L.h),)),
        SameForEveryHead(("K_l", "V_l"), ((L.g, 1),)),
        CacheAgainst(("K", "V"), before),
        WeightCount(("W_k", "W_v")),
    )


def _qk_norm_claims(before: Graph, wrap: Wrap) -> tuple[Claim, ...]:
    return (On(with_qk_norm(before), ScoreBound()),)


def _rope_claims(before: Graph, wrap: Wrap) -> tuple[Claim, ...]:
    return RelativePosition(), ZeroAngles(before)


LAYERS = {
    layer.name: layer
    for layer in (
        Layer(
            "gqa", 0, "Grouped-query attention",
            "In grouped-query attention (the book's Llama 3 and Qwen 3) the $h$ query heads "
            "share $g$ groups of keys and values: $h/g$ heads read the same keys and values. "
            "The keys and values, and the cache that keeps them, shrink by $g/h$; with $g = h$ "
            "it is multi-head attention, with $g = 1$ multi-query attention.",
            grouped, _gqa_claims, heads=True, sizes=((L.h, 2), (L.g, 1)),
            options=(("heads", L.h), ("groups", L.g)),
        ),
        Layer(
            "qk-norm", 1, "QK-norm",
            "QK-norm (the book's Qwen 3) divides each query and each key by its root mean "
            "square and scales it by learned gains before the scores. The scores then stay "
            "within a bound set by the width and the gains, whatever the scale of the inputs: "
            "growing inputs cannot saturate the softmax.",
            with_qk_norm, _qk_norm_claims, parameters=((L.eps, sp.Rational(1, 10**6)),),
            options=(("q_gain", "G_q"), ("k_gain", "G_k"), ("eps", L.eps)),
        ),
        Layer(
            "rope", 2, "Rotary position embeddings (RoPE)",
            "Rotary position embeddings (the book's Llama 3 and Qwen 3) rotate each query and "
            "each key by angles proportional to its position, pair of features by pair of "
            "features, before the scores. The book's code pairs feature $j$ with feature "
            "$j + c/2$ and counts positions from 0; the angles use the base $\\beta = 10\\,000$.",
            with_rope, _rope_claims, parameters=((L.beta, 10_000),),
            options=(("theta_base", L.beta),),
        ),
    )
}  # fmt: skip

_MODELS = {("gqa", "rope"): "Llama 3", ("gqa", "qk-norm", "rope"): "Qwen 3"}


def _title(layers: tuple[Layer, ...]) -> str:
    if len(layers) == 1:
        return layers[0].title
    first, *rest = layers
    names = [layer.title.split(" (")[0] if layer.name != "rope" else "RoPE" for layer in rest]
    joined = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
    model = _MODELS.get(tuple(layer.name for layer in layers))
    return f"{first.title} with {joined}" + (f" (the attention of {model})" if model else "")


@functools.cache
def combination(names: tuple[str, ...]) -> Variant:
    """The variant of these layers (``("gqa", "rope")``), applied in their order."""
    unknown = [name for name in names if name not in LAYERS]
    if unknown or len(set(names)) != len(names):
        raise ValueError(f"{'+'.join(names)}: only {', '.join(LAYERS)} combine, each once")
    layers = tuple(sorted((LAYERS[name] for name in names), key=lambda layer: layer.rank))
    heads = any(layer.heads for layer in layers)
    start = S.self_attention(causal=True, heads=heads)
    graph, claims = start, []
    for index, layer in enumerate(layers):
        later = layers[index + 1 :]

        def wrap(g: Graph, later: tuple[Layer, ...] = later) -> Graph:
            for after in later:
                g = after.transform(g)
            return g

        claims += layer.claims(graph, wrap)
        graph = layer.transform(graph)
    arguments = ("X", "W_q", "W_k", "W_v", *(("W_o",) if heads else ()))
    options = (("causal", True), *(o for layer in layers for o in layer.options))
    return Variant(
        "+".join(layer.name for layer in layers), _title(layers), graph, start, tuple(claims),
        tuple(size for layer in layers for size in layer.sizes),
        Twin("attention.grouped.grouped_query_attention", arguments, options),
        " ".join(layer.text for layer in layers),
        tuple(p for layer in layers for p in layer.parameters),
    )  # fmt: skip


def _mla() -> Variant:
    base = S.self_attention(causal=True, heads=True)
    return Variant(
        "mla", "Multi-head latent attention", latent_attention(), base,
        (Absorption(), CacheAgainst(("U",), base)), ((L.h, 2), (L.d_u, 2)),
        Twin("attention.latent.latent_attention",
             ("X", "W_q", "W_dkv", "W_uk", "W_uv", "W_o"), (("heads", L.h), ("causal", True))),
        "Multi-head latent attention (DeepSeek's; the book builds it in ch. 4) projects each "
        "token once to a small latent $U$ of width $d_u$, and computes the keys and values "
        "from it. A cache keeps the latent only, and a head's scores can be computed from the "
        "latent without ever forming the keys.",
    )  # fmt: skip


def models() -> tuple[Variant, ...]:
    """The registered single variants: rope, gqa, qk-norm (each alone) and mla."""
    return (combination(("rope",)), combination(("gqa",)), combination(("qk-norm",)), _mla())
