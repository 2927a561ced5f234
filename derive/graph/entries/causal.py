"""Causal attention (the book's section 3.5): a token attends to itself and the tokens before it.

A mask M is declared, 0 where p ≤ m and −∞ elsewhere, and added to the scaled scores before the
softmax (`with_mask`, for one head or each head alike). Its twins: `self_attention(...,
causal=True)` and the book's `CausalAttention`; it adds ``causal=True`` to the twins of the
variants it joins.
"""

from __future__ import annotations

import importlib
import typing
from dataclasses import dataclass, replace

import sympy as sp
from sympy import Eq

from ...notation import letters as L
from ...notation.letters import Letter, register_letter
from .. import attention as S
from ..claims import RowsSumToOne
from ..declaration import Declaration, Graph
from ..twins import ModuleTwin, StepTwin
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

#: The mask's fixed pattern (causal, a window) where a given mask M joins it (masked attention
#: on a causal base: a batch's padding and the causal mask together).
MASK_FIXED = register_letter(
    Letter(
        "M_fixed",
        "maskfixed",
        r"\mathring{M}",
        r"\mathring{M}",
        meaning="the mask's fixed pattern (causal, a window), where a given mask $M$ joins it: "
        "0 where token m may attend to p, minus infinity where not",
        indices=(L.m, L.p),
        shape=(L.n, L.n),
        constant=True,
        after="omegahat",
    )
)

__all__ = ["VARIANT", "MASK_FIXED", "with_mask", "fixed_pattern", "with_pattern"]

TEXT = (
    "Causal attention: when processing token $m$, a decoder may not look at the tokens after "
    "it. A mask $M$ is declared, 0 where a token may attend and minus infinity where it may "
    "not, and added to the scaled scores before the softmax, which is the same declaration as "
    "the softmax of self-attention, read on the masked scores. A query that may attend to no "
    "key at all (a fully masked row, possible with a padding mask) would divide 0 by 0; by "
    "convention its weights and its context vector are 0, which is what the implementation "
    "returns, with finite gradients."
)


def fixed_pattern(pattern: Declaration) -> Declaration:
    """The mask's pattern as M̊: the same numbers, under its own letter."""
    lhs = L.base("maskfixed")[pattern.element.lhs.indices]
    shapes = {("M_fixed" if k == "M" else k): v for k, v in pattern.shapes.items()}
    element = Eq(lhs, pattern.element.rhs, evaluate=False)
    return replace(pattern, output="M_fixed", element=element, shapes=shapes)


def _joined(step: Declaration) -> Declaration:
    """A step that reads the mask M (the masked scores), reading M̊ + M; a twin given the mask
    as an option given both, each query's allowed keys those both allow."""
    rhs = step.element.rhs.xreplace(
        {
            e: e + L.base("maskfixed")[e.indices]
            for e in step.element.rhs.atoms(sp.Indexed)
            if e.base == L.base("mask")
        }
    )
    shapes = {**step.shapes, "M_fixed": step.shapes["M"]} if "M" in step.shapes else step.shapes
    twin = step.twin
    if twin is not None and ("mask", "M") in twin.options:
        options = tuple(
            (k, ("M", "M_fixed")) if (k, v) == ("mask", "M") else (k, v) for k, v in twin.options
        )
        twin = replace(twin, options=options)
    return replace(
        step, element=Eq(step.element.lhs, rhs, evaluate=False), shapes=shapes, twin=twin
    )


def _given_and_fixed(graph: Graph, pattern: Declaration, name: str) -> Graph:
    """`graph`, masked by a given M or by `pattern` already, masked by both: the pattern as M̊
    (`fixed_pattern`), the masked scores ω̂ = ω̃ + M̊ + M."""
    steps: list[Declaration] = []
    for step in graph.declarations:
        if step.output == "M":
            continue
        if step.name == "masked_scores" and not any(s.output == "M_fixed" for s in steps):
            steps.append(fixed_pattern(pattern))
        steps.append(_joined(step) if "M" in step.inputs or _reads_mask(step) else step)
    named = graph.name.replace("self-attention", f"{name} self-attention")
    return Graph(named, tuple(steps), graph.relations)


def _reads_mask(step: Declaration) -> bool:
    return step.twin is not None and ("mask", "M") in step.twin.options


def with_pattern(graph: Graph, mask: Declaration) -> Graph:
    """`graph` with `mask` in its mask's pattern (M, or M̊ where a given M joins it): in place of
    the causal mask, which every pattern keeps (p ≤ m); with another pattern, both (a window cut
    at the chunks' borders: a key is read where each allows it)."""
    letter = "M_fixed" if graph.producer("M_fixed") is not None else "M"
    existing = graph.producer(letter)
    if existing is None:
        raise ValueError(
            f"{mask.title[0].lower()}{mask.title[1:]} cuts the causal mask, which {graph.name} "
            "does not have"
        )
    if existing.name != S.causal_mask().name:
        mask = both_patterns(existing, mask)
    return graph.with_step(fixed_pattern(mask) if letter == "M_fixed" else mask)


def both_patterns(first: Declaration, second: Declaration) -> Declaration:
    """One mask of two patterns: 0 where both allow the key, −∞ elsewhere; its twin the two
    twins' masks, True where both are."""
    allowed = sp.And(*(_allowed(step) for step in (first, second)))
    rhs = sp.Piecewise((0, allowed), (-sp.oo, True))
    twins = tuple(typing.cast(StepTwin, step.twin) for step in (first, second))
    title = f"{first.title} and {second.title[0].lower()}{second.title[1:]}"
    return replace(
        second,
        name=f"{first.name}_and_{second.name}",
        title=title,
        element=Eq(L.base("mask")[L.m, L.p], rhs, evaluate=False),
        twin=StepTwin(
            BothMasks(twins), (), tuple(dict.fromkeys(o for t in twins for o in t.options))
        ),
        requires=tuple(dict.fromkeys((*first.requires, *second.requires))),
    )


def _allowed(step: Declaration) -> sp.Basic:
    """Where a pattern's mask is 0: the condition of its first piece."""
    (value, condition), _ = step.element.rhs.args
    if value != 0:
        raise ValueError(f"{step.title} is not 0 where a key is allowed and −∞ elsewhere")
    return condition


@dataclass(frozen=True)
class BothMasks:
    """The twin of `both_patterns`: each pattern's twin called with its own options, True where
    both masks are."""

    twins: tuple[StepTwin, ...]

    def __call__(self, **options: object) -> typing.Any:
        masks = []
        for twin in self.twins:
            function = twin.function
            if isinstance(function, str):
                module, _, name = function.rpartition(".")
                function = getattr(importlib.import_module(module), name)
            masks.append(function(**{key: options[key] for key, _ in twin.options}))
        first, *rest = masks
        for mask in rest:
            first = first & mask
        return first


def with_mask(graph: Graph, mask: Declaration | None, name: str) -> Graph:
    """`graph` with a mask M added to the scaled scores before the softmax (each head's): the
    declared `mask` (None: M is an input, given). Where the graph is masked already, by a
    pattern (causal, a window) and now by a given M or the other way round, it is masked by
    both (`_given_and_fixed`); two patterns, or two given masks, are refused."""
    existing = graph.producer("M")
    if existing is not None and mask is None:
        return _given_and_fixed(graph, existing, name)
    if "M" in graph.inputs and mask is not None:
        return _given_and_fixed(graph, mask, name)
    if existing is not None or "M" in graph.inputs:
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


def causal(graph: Graph) -> Graph:
    """`graph` with the causal mask (`with_mask`); a graph whose weights are causal already is
    left as it is (linear attention's, a_{m,p} = 0 for p > m: `causal_already`)."""
    if causal_already(graph):
        return graph
    return with_mask(graph, S.causal_mask(), "causal")


def causal_already(graph: Graph) -> bool:
    """Whether the graph's weights (each head's) are 0 past the query's own position by their
    own formula: a Piecewise whose first piece holds for p ≤ m and whose last is 0."""
    step = S.weights_step(graph)
    if step is None:
        return False
    rhs = step.element.rhs
    return (
        isinstance(rhs, sp.Piecewise)
        and rhs.args[0].cond in (sp.Le(L.p, L.m), sp.Ge(L.m, L.p))
        and rhs.args[-1].expr == 0
    )


_LINEAR = (
    ("W_query.weight", "W_q", True),
    ("W_key.weight", "W_k", True),
    ("W_value.weight", "W_v", True),
)

VARIANT = Variant(
    "causal",
    "Causal attention",
    TEXT,
    build=causal,
    claims=(RowsSumToOne(),),
    options=(("causal", True),),
    also=(
        ModuleTwin("attention.CausalAttention", (L.d, L.c, L.n, 0.0), _LINEAR, implies=("causal",)),
    ),
    rank=30,
    short="causal attention",
    document=Document(sections=(*Document().sections[:-1], "example", "code")),
    notation=(MASK, OMEGA_MASKED),
)
